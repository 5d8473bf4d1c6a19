"""An astuner token engine over verl's `server_manager`.

verl's agent-loop workers reach the rollout servers (vLLM, SGLang) through
`server_manager.generate(request_id=, prompt_ids=, sampling_params=)`, which
returns the sampled token ids and, when asked with `logprobs`, their
log-probs. The `ModelTuner` of an astuner run calls this engine exactly as
it calls the in-process one, so the context tracker records verl's tokens.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from astuner.api import AstunerError, Generation, SamplingParams
from astuner.training import FinishReason

# verl's stop reasons (vLLM's finish reasons, "aborted" on a cancelled request)
_FINISH: dict[str, FinishReason] = {"length": "length", "abort": "abort", "aborted": "abort"}


class VerlServerEngine:
    """`TokenEngine` over verl's server manager; one per episode (one sticky request id)."""

    def __init__(self, server_manager: Any, extra: Mapping[str, Any] | None = None) -> None:
        self.server_manager = server_manager
        # verl's own sampling keys (e.g. repetition_penalty) pass through; ours win.
        self.extra = {k: v for k, v in (extra or {}).items() if k not in ("logprobs", "max_tokens")}
        # One request id per episode: verl routes a session to the same server (prefix cache).
        self.request_id = uuid.uuid4().hex
        self.seconds = 0.0

    def sampling_params(self, sampling: SamplingParams) -> dict[str, Any]:
        """verl's sampling dict for one call: greedy is temperature 0."""
        params = {
            **self.extra,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k,
            "max_tokens": sampling.max_tokens,
            "logprobs": True,
        }
        if sampling.seed is not None:
            params["seed"] = sampling.seed
        return params

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        started = time.perf_counter()
        out = await self.server_manager.generate(
            request_id=self.request_id,
            prompt_ids=list(prompt_ids),
            sampling_params=self.sampling_params(sampling),
        )
        self.seconds += time.perf_counter() - started
        ids = list(out.token_ids)
        logprobs = list(out.log_probs) if out.log_probs is not None else None
        if logprobs is None or len(logprobs) != len(ids):
            raise AstunerError(
                "verl's rollout server returned no log-prob per token; astuner trains on them. "
                "Keep actor_rollout_ref.rollout.calculate_log_probs unset in the verl: block."
            )
        finish = _FINISH.get(str(out.stop_reason), "stop") if out.stop_reason is not None else "stop"
        return Generation(ids, [float(x) for x in logprobs], finish)
