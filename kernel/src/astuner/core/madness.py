"""Madness checks: detect an agent that went off the rails.

A check is any object with `check(call: LLMCall) -> str | None`: it looks at
one finished model call and returns a short reason when the call is bad,
None when it is clean. Checks are registered by plugins through the
`register_madness_checks` hook (the defaults live in
`astuner.default_plugins.madness_checks`) and chosen by
`rollout.compute_madness_checklist`.

`MadnessMonitor` runs the chosen checks on every call of a rollout as it
happens, so a flagged rollout can stop early (`agent_madness_termination`);
`apply_madness_reward` then gives a flagged trajectory the configured
`agent_madness_reward`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from astuner.core.trajectory import LLMCall, Trajectory


@runtime_checkable
class MadnessCheck(Protocol):
    """Inspects one model call; returns why it is bad, or None if it is clean.

    ```python
    from astuner.api import LLMCall, MadnessCheck


    class EmptyReply:
        def check(self, call: LLMCall) -> str | None:
            return "the reply is empty" if not call.text.strip() and not call.tool_calls else None


    assert isinstance(EmptyReply(), MadnessCheck)
    ```
    """

    def check(self, call: LLMCall) -> str | None: ...


class MadnessMonitor:
    """Runs named checks on each call of one rollout and remembers what fired."""

    def __init__(self, checks: Mapping[str, MadnessCheck], terminate: bool = True) -> None:
        self.checks = dict(checks)
        self.terminate = terminate
        self.flags: list[str] = []

    def observe(self, call: LLMCall) -> list[str]:
        """Run every check on `call`; return (and remember) `"<check>: <reason>"` for each hit."""
        hits = []
        for name, chk in self.checks.items():
            reason = chk.check(call)
            if reason is not None:
                hits.append(f"{name}: {reason}")
        self.flags.extend(hits)
        return hits

    @property
    def should_stop(self) -> bool:
        """True once a check fired and termination is on."""
        return self.terminate and bool(self.flags)


def apply_madness_reward(trajectory: Trajectory, madness_reward: float) -> Trajectory:
    """Give a flagged trajectory `madness_reward` (replacing any per-step rewards).

    With per-agent rewards only the agents whose calls were flagged get it
    (the others keep the judge's), and `reward` stays their mean. Returns
    the same object, changed in place.
    """
    if not trajectory.madness:
        return trajectory
    rewards = trajectory.agent_rewards
    if rewards:
        # A check on the whole trajectory (no call flagged) penalises every agent.
        flagged = {c.agent_name for c in trajectory.calls if c.madness} or set(rewards)
        rewards.update({agent: float(madness_reward) for agent in flagged & set(rewards)})
        trajectory.reward = sum(rewards.values()) / len(rewards)
    else:
        trajectory.reward = float(madness_reward)
    return trajectory


class NonsenseSettings(BaseModel):
    """Settings of the `nonsense` check (`rollout.madness.nonsense`)."""

    model_config = ConfigDict(extra="forbid")

    special_token_pattern: str = Field(
        r"<\|[A-Za-z0-9_]+\|>",
        description="regex for special-token text that must not appear inside a reply",
    )
    max_ngram: int = Field(16, ge=1, description="longest repeated n-gram looked for")
    min_repeats: int = Field(8, ge=2, description="back-to-back copies that count as a loop")
    min_span: int = Field(48, ge=1, description="fewest tokens a loop must cover")


class NonsenseCheck:
    """Flags stray special tokens and generation loops (one n-gram repeated back to back)."""

    def __init__(self, settings: NonsenseSettings | None = None) -> None:
        self.settings = settings or NonsenseSettings()
        self._special = re.compile(self.settings.special_token_pattern)

    def check(self, call: LLMCall) -> str | None:
        m = self._special.search(call.text)
        if m is not None:
            return f"stray special token {m.group(0)!r}"
        # Without token ids (an engine that returns text only) look for loops in characters.
        seq = call.response_ids or [ord(c) for c in call.text]
        n, repeats = longest_repeat(seq, self.settings.max_ngram)
        if repeats >= self.settings.min_repeats and n * repeats >= self.settings.min_span:
            return f"a {n}-gram repeated {repeats:g} times"
        return None


def longest_repeat(seq: Sequence[int], max_ngram: int) -> tuple[int, float]:
    """Find the n-gram (n <= max_ngram) repeated back to back the most times in `seq`.

    For each period n, `seq[i] == seq[i - n]` holding for a run of r
    positions means the n tokens before the run are copied (r + n) / n times
    in a row. Returns `(n, copies)` of the run with the most copies
    (`(0, 0.0)` for an empty sequence). O(len(seq) * max_ngram), vectorised.
    """
    # numpy is imported here so that registering the default checks stays cheap.
    import numpy as np

    a = np.asarray(seq, dtype=np.int64)
    best_n, best = 0, 0.0
    for n in range(1, min(max_ngram, len(a) - 1) + 1):
        eq = a[n:] == a[:-n]
        if not eq.any():
            continue
        # Longest run of True: indices where eq switches on and off.
        edges = np.diff(np.concatenate(([0], eq.view(np.int8), [0])))
        run = int((np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)).max())
        copies = (run + n) / n
        if copies > best:
            best_n, best = n, copies
    return best_n, best


class WrongToolCallCheck:
    """Flags a call whose text contained a malformed tool call."""

    def check(self, call: LLMCall) -> str | None:
        if not call.tool_call_errors:
            return None
        first = call.tool_call_errors[0]
        return f"{len(call.tool_call_errors)} malformed tool call(s), first: {first.error}"


class NonAsciiSettings(BaseModel):
    """Settings of the `non_ascii` check (`rollout.madness.non_ascii`)."""

    model_config = ConfigDict(extra="forbid")

    max_fraction: float = Field(
        0.0, ge=0.0, le=1.0, description="largest tolerated share of non-ASCII characters"
    )


class NonAsciiCheck:
    """Flags replies with more non-ASCII characters than allowed (opt-in: many
    tasks legitimately need them)."""

    def __init__(self, settings: NonAsciiSettings | None = None) -> None:
        self.settings = settings or NonAsciiSettings()

    def check(self, call: LLMCall) -> str | None:
        text = call.text
        if not text or text.isascii():
            return None
        count = sum(1 for c in text if ord(c) > 127)
        if count / len(text) > self.settings.max_fraction:
            return f"{count} non-ASCII characters out of {len(text)}"
        return None
