"""What a token engine is asked and what it answers: sampling settings and generations.

These value types belong to the token core: the context tracker reads a
`Generation` and records the `SamplingParams` it carries, and the core
imports nothing above it. `astuner.rollout.engine` re-exports them beside the engine
protocols that use them, so either import path works.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, NamedTuple

from astuner.core.trajectory import CallSampling
from astuner.errors import AstunerError

FinishReason = Literal["stop", "length", "abort"]


SAMPLING_KEYS = ("temperature", "top_p", "top_k", "max_tokens", "seed")
"""What a single call may override (`SamplingParams.override`)."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one response. `temperature == 0` means greedy; `top_k <= 0` and `top_p == 1`
    switch those filters off.

    Built from the config in one place (`astuner.rollout.sampling.sampling_from_config`) and
    changed per call only through `override`, which checks the values. `adapter` names the LoRA
    adapter that generates (`agents.<name>.lora`; None: the policy itself): the model handle
    sets it from the calling agent's name, an engine without adapters refuses one.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 512
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None
    adapter: str | None = None

    def __post_init__(self) -> None:
        problems = []
        if not (isinstance(self.temperature, int | float) and 0.0 <= self.temperature < math.inf):
            problems.append(f"temperature must be a finite number >= 0, not {self.temperature!r}")
        if not (isinstance(self.top_p, int | float) and 0.0 < self.top_p <= 1.0):
            problems.append(f"top_p must be in (0, 1], not {self.top_p!r}")
        if not (_is_int(self.top_k) and self.top_k >= -1):
            problems.append(f"top_k must be an integer >= -1 (-1 or 0: off), not {self.top_k!r}")
        if not (_is_int(self.max_tokens) and self.max_tokens >= 1):
            problems.append(f"max_tokens must be an integer >= 1, not {self.max_tokens!r}")
        if not (self.seed is None or _is_int(self.seed)):
            problems.append(f"seed must be an integer or None, not {self.seed!r}")
        if problems:
            raise AstunerError(
                f"Invalid sampling settings: {'; '.join(problems)}. Fix rollout.* (or "
                "auxiliary_models.<name>.*) in the config, or the model call that passed the value."
            )

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def override(self, **changes: Any) -> SamplingParams:
        """These settings with one call's changes (`SAMPLING_KEYS`; a None value keeps the setting).

        Raises `AstunerError` naming an unknown key or a bad value, so a workflow's typo fails
        at the call that made it instead of sampling with the rollout's settings unnoticed.
        """
        unknown = sorted(set(changes) - set(SAMPLING_KEYS))
        if unknown:
            raise AstunerError(
                f"Unknown sampling setting(s) {unknown} for a model call: a call may override "
                f"{', '.join(SAMPLING_KEYS)}."
            )
        given = {key: value for key, value in changes.items() if value is not None}
        return replace(self, **given) if given else self

    def record(self) -> CallSampling:
        """What a call records of these settings (`LLMCall.sampling`)."""
        return CallSampling(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_tokens=self.max_tokens,
            adapter=self.adapter,
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class Generation(NamedTuple):
    """A token engine's answer.

    `logprobs[i]` is the log-probability of `token_ids[i]` under the
    sampling distribution at temperature `T` (log-softmax of logits / T;
    T = 1 when greedy), which is what the trainer recomputes.
    `policy_version` says which weights sampled it (the number of policy
    updates a trainer had pushed to the engine), None when unknown.
    `sampling` is what it was sampled with; an engine may leave it None,
    and the model handle then fills in the settings it gave the engine.
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    policy_version: int | None = None
    sampling: SamplingParams | None = None


def sampling_overrides(options: Mapping[str, Any]) -> dict[str, Any]:
    """The sampling settings among a chat model call's provider options (`SAMPLING_KEYS`).

    Other options (`stream`, `response_format`, ...) do not apply to a
    recorded call and are left out; the model handle checks the values.
    """
    return {key: options[key] for key in SAMPLING_KEYS if key in options}
