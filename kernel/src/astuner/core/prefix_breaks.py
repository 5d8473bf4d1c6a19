"""Prefix breaks: why a call did not extend the sample of its agent's previous call.

When a call of an agent that already has a sample extends none of that
agent's samples, merging (`astuner.core.merge`) records a `PrefixBreak`
against the sample holding the agent's previous call: the first token where the two
differ (the longest common prefix of the new prompt and that sample's ids)
and why, told from the previous call's messages and reply against the new
call's messages (`H` and `M` below), with no tokenizer:

- `new_conversation`: `M` shares no message with `H` beyond a leading
  system message and does not carry the previous reply (a new task).
- `tools_changed`: the tool list differs (tools are part of the prompt).
- `reply_dropped`: `M` starts with `H` but the previous reply is not the
  next message (the agent retried, or kept only what came after).
- `message_edited`: message k of `H` differs in `M` (memory summarised or
  rewritten, or the echoed reply is not the reply the model gave).
- `message_removed`: messages of `H` from k on are gone and `M` goes on
  with the rest of `H` and the reply (a hint added for one call, then removed).
- `message_inserted`: `M` has new messages at k, then `H` from k on and the reply.
- `reasoning_stripped`: message k is an assistant message equal except for
  its reasoning (`reasoning_content`, a `<think>` block), or `M` extends
  `H` with the reply but the ids part inside a reply whose call reasoned
  (the template dropped reasoning from history).
- `retokenized`: `M` extends `H` with the reply and the ids still part:
  the history tokenised differently when re-rendered (retokenisation drift,
  a re-serialised tool call).

The first that applies, in this order, is the reason. Inside a reply, ids
alone cannot say whether the template dropped the reasoning or re-wrote
something else, so a reply whose call reasoned counts as `reasoning_stripped`.
`message`/`role` name the message (see `PrefixBreak`). With merging on,
every sample but each agent's first starts with a break: a trajectory's
samples are its breaks plus one per agent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

from astuner.core.chat import flatten_content
from astuner.core.toolcalls import split_reasoning
from astuner.core.trajectory import LLMCall

BreakReason = Literal[
    "new_conversation",
    "tools_changed",
    "reply_dropped",
    "message_edited",
    "message_removed",
    "message_inserted",
    "reasoning_stripped",
    "retokenized",
]
BREAK_REASONS: tuple[BreakReason, ...] = get_args(BreakReason)


@dataclass(frozen=True)
class PrefixBreak:
    """Why call `call` started a new sample instead of extending sample `sample`.

    `sample` is an index into the trajectory's samples and holds the same
    agent's previous call `previous_call`; `position` is the first token where
    the call's prompt differs from that sample's ids (its common prefix length).
    `message` is the index of the message that changed: in the previous
    call's messages for `message_edited`, `message_removed` and
    `reasoning_stripped`; in the call's own messages for `message_inserted`,
    `reply_dropped` and for a reply whose tokens changed (`retokenized`,
    `reasoning_stripped` from ids); None when no single message is to blame.
    `role` is that message's role.
    """

    call: int
    sample: int
    previous_call: int
    position: int
    reason: BreakReason
    message: int | None = None
    role: str | None = None
    trajectory_id: str = ""

    def describe(self) -> str:
        """One line for people: which call, which sample, what changed, where."""
        where = f"message {self.message} ({self.role})" if self.message is not None else "the history"
        what = {
            "new_conversation": "a new conversation",
            "tools_changed": "the tools changed",
            "reply_dropped": f"the previous reply is missing at {where}",
            "message_edited": f"{where} was edited",
            "message_removed": f"{where} was removed",
            "message_inserted": f"{where} was inserted",
            "reasoning_stripped": f"reasoning was stripped from {where}",
            "retokenized": f"{where} was retokenised",
        }[self.reason]
        return (
            f"call {self.call} does not extend sample {self.sample} (last call {self.previous_call}): "
            f"{what}; the prompts differ from token {self.position}"
        )


class GrowingSample(Protocol):
    """What classifying a break reads of a sample that merging is still building.

    `index` is the sample's place in the trajectory's samples, `ids` its
    tokens so far, `calls` the calls merged into it, in order, and `spans`
    the `(begin, end, call index)` of each of their replies in `ids`.
    """

    @property
    def index(self) -> int: ...

    @property
    def ids(self) -> Sequence[int]: ...

    @property
    def calls(self) -> Sequence[LLMCall]: ...

    @property
    def spans(self) -> Sequence[tuple[int, int, int]]: ...


def prefix_break(sample: GrowingSample, call: LLMCall, trajectory_id: str = "") -> PrefixBreak:
    """Why `call` does not extend `sample`, the sample holding its agent's previous call."""
    previous = sample.calls[-1]
    position = _common_prefix(call.prompt_ids, sample.ids)
    reason, message, role = _classify(previous, call, sample, position)
    return PrefixBreak(
        call=call.index,
        sample=sample.index,
        previous_call=previous.index,
        position=position,
        reason=reason,
        message=message,
        role=role,
        trajectory_id=trajectory_id,
    )


def _common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Length of the longest common prefix of `a` and `b`."""
    n = min(len(a), len(b))
    # Slices compare in C; only the last, differing block is walked in Python.
    block = 256
    i = 0
    while i + block <= n and a[i : i + block] == b[i : i + block]:
        i += block
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _classify(
    previous: LLMCall, call: LLMCall, sample: GrowingSample, position: int
) -> tuple[BreakReason, int | None, str | None]:
    """The reason, message index and role of a break (see the module doc)."""
    old, new = previous.messages, call.messages
    if not _shares_conversation(old, new, previous):
        return "new_conversation", None, None
    if (previous.tools or None) != (call.tools or None):
        return "tools_changed", None, None
    k = _common_prefix(old, new)
    if k == len(old):
        if k == len(new) or new[k].get("role") != "assistant":
            return "reply_dropped", k, "assistant"
        if not _echoes(new[k], previous):
            return "message_edited", k, "assistant"
        return _token_reason(sample, position)
    role = old[k].get("role")
    if (
        k < len(new)
        and role == "assistant" == new[k].get("role")
        and _without_reasoning(old[k]) == _without_reasoning(new[k])
    ):
        return "reasoning_stripped", k, role
    for j in range(k + 1, len(old) + 1):
        if _goes_on_with(new, k, old[j:], previous):
            return "message_removed", k, role
    for j in range(k + 1, len(new)):
        if _goes_on_with(new, j, old[k:], previous):
            return "message_inserted", k, new[k].get("role")
    return "message_edited", k, role


def _token_reason(sample: GrowingSample, position: int) -> tuple[BreakReason, int | None, str | None]:
    """The messages extend; the ids part at `position`: inside a reply, or in the re-rendered prompt."""
    for (begin, end, _), owner in zip(sample.spans, sample.calls, strict=True):
        if begin <= position < end:
            # The reply's echo follows the messages its call was given.
            reason: BreakReason = "reasoning_stripped" if owner.reasoning else "retokenized"
            return reason, len(owner.messages), "assistant"
    return "retokenized", None, None


def _goes_on_with(
    new: Sequence[Mapping[str, Any]], at: int, rest: Sequence[Mapping[str, Any]], previous: LLMCall
) -> bool:
    """Whether `new[at:]` is `rest`, then the previous reply (or nothing yet)."""
    end = at + len(rest)
    if list(new[at:end]) != list(rest):
        return False
    return end == len(new) or _echoes(new[end], previous)


def _echoes(message: Mapping[str, Any], call: LLMCall) -> bool:
    """Whether `message` is `call`'s reply as an agent puts it back into its history.

    Agents re-serialise tool calls and may keep or drop reasoning and
    whitespace, so the test is loose: the same tool names, and the reply's
    content inside the message's.
    """
    if message.get("role") != "assistant":
        return False
    names = [(tc.get("function") or tc).get("name") for tc in message.get("tool_calls") or []]
    if names != [tc.name for tc in call.tool_calls]:
        return False
    return call.content.strip() in flatten_content(message.get("content"))


def _without_reasoning(message: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in message.items() if k != "reasoning_content"}
    _, rest = split_reasoning(flatten_content(out.get("content")))
    out["content"] = rest.strip()
    return out


def _shares_conversation(
    old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]], previous: LLMCall
) -> bool:
    """Whether `new` keeps anything of `old` but its system message, or the previous reply."""
    kept = [m for i, m in enumerate(old) if not (i == 0 and m.get("role") == "system")]
    return any(m in new for m in kept) or any(_echoes(m, previous) for m in new)
