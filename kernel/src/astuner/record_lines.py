"""One trajectory on one line of a rollout file, its size bounded per call.

Every call's token ids and log-probs are kept whole: they are what training
reads. The texts beside them are bounded, since a call repeats its agent's
whole history and a request may carry megabytes:

- messages a call shares with its agent's previous call (the usual case: a
  conversation grows at its end) are kept once, in the earlier call; the
  later one starts with a stand-in, `{"astuner.repeats": {"call": j,
  "messages": n}}`: its first n messages are those of call j in the same list;
  tools the same as that call's are the stand-in `[{"astuner.repeats":
  {"call": j}}]`;
- a text longer than `TEXT_LIMIT` characters in a message or tool keeps its
  head and tail around a `CLIP_NOTE` that says how much was cut, all three
  within the limit (the call's `prompt_ids` still hold it whole, unless the
  call overflowed the context: its note then says they do not).

`trajectory_line` writes that form and `load_trajectory` reads it back, with
the repeated messages restored; a line written before this form reads as it
always did.
"""

from __future__ import annotations

import re
from typing import Any

from astuner.core.trajectory import LLMCall, Trajectory

TEXT_LIMIT = 32_768
REPEATS = "astuner.repeats"
CLIP_NOTE = (
    "\n[astuner: {cut} characters of this text are not kept in the record; the call's prompt_ids hold it]\n"
)
# A context overflow keeps at most max_model_len prompt ids, maybe none (`LLMCall.prompt_ids_omitted`).
OVERFLOW_CLIP_NOTE = (
    "\n[astuner: {cut} characters of this text are not kept in the record; the call overflowed the "
    "context and kept only part of its prompt_ids, if any]\n"
)
CLIPPED = re.compile(r"\[astuner: ([\d,]+) characters of this text are not kept in the record")


def trajectory_line(trajectory: Trajectory) -> str:
    """`trajectory` as one JSON line, its messages kept once and its long texts clipped."""
    bounded = trajectory.model_copy(
        update={"calls": _bounded(trajectory.calls), "auxiliary_calls": _bounded(trajectory.auxiliary_calls)}
    )
    return bounded.model_dump_json()


def load_trajectory(line: str | bytes) -> Trajectory:
    """The trajectory on one line of a rollout file, with the messages it keeps once restored.

    Raises ValueError (pydantic's ValidationError is one) for a line that is
    not a trajectory, or one whose stand-in names a call it cannot repeat.
    """
    trajectory = Trajectory.model_validate_json(line)
    _restore(trajectory.calls)
    _restore(trajectory.auxiliary_calls)
    return trajectory


def clipped_characters(trajectory: Trajectory) -> int:
    """How many characters of the trajectory's texts its record did not keep (0: none were cut)."""
    calls = [*trajectory.calls, *trajectory.auxiliary_calls]
    texts = {str(m.get("content", "")) for c in calls for m in c.messages}  # a repeated message counts once
    return sum(int(n.replace(",", "")) for text in texts for n in CLIPPED.findall(text))


def _bounded(calls: list[LLMCall]) -> list[LLMCall]:
    last: dict[str, tuple[int, LLMCall]] = {}  # agent -> the position of its previous call, and that call
    out = []
    for position, call in enumerate(calls):
        note = CLIP_NOTE if call.prompt_ids_omitted == 0 else OVERFLOW_CLIP_NOTE
        messages, tools = call.messages, _clip(call.tools, note)
        kept: list[dict[str, Any]] = []
        if call.agent_name in last:
            before, previous = last[call.agent_name]
            shared = 0
            while (
                shared < min(len(previous.messages), len(messages))
                and previous.messages[shared] == messages[shared]
            ):
                shared += 1
            if shared:
                kept.append({REPEATS: {"call": before, "messages": shared}})
                messages = messages[shared:]
            if call.tools and call.tools == previous.tools:
                tools = [{REPEATS: {"call": before}}]
        last[call.agent_name] = (position, call)
        kept.extend(_clip(message, note) for message in messages)
        out.append(call.model_copy(update={"messages": kept, "tools": tools}))
    return out


def _clip(value: Any, note: str) -> Any:
    if isinstance(value, str) and len(value) > TEXT_LIMIT:
        # Head, note and tail fit in the limit, so a record read back and written again stays as it is.
        half = (TEXT_LIMIT - len(note.format(cut=f"{len(value):,}"))) // 2
        return value[:half] + note.format(cut=f"{len(value) - 2 * half:,}") + value[-half:]
    if isinstance(value, dict):
        return {key: _clip(item, note) for key, item in value.items()}
    if isinstance(value, list):
        return [_clip(item, note) for item in value]
    return value


def _restore(calls: list[LLMCall]) -> None:
    for position, call in enumerate(calls):
        if call.tools and len(call.tools) == 1 and REPEATS in call.tools[0]:
            call.tools = calls[_earlier(call.tools[0][REPEATS], position)].tools
        if not call.messages or REPEATS not in call.messages[0]:
            continue
        stand_in = call.messages[0][REPEATS]
        source, count = _earlier(stand_in, position), stand_in.get("messages")
        repeated = calls[source].messages
        if not (isinstance(count, int) and 0 < count <= len(repeated)):
            raise ValueError(
                f"call {position} repeats {count!r} messages of call {source}, which has {len(repeated)}"
            )
        call.messages = [*repeated[:count], *call.messages[1:]]


def _earlier(stand_in: Any, position: int) -> int:
    """The call a stand-in in call `position` names: one that comes before it."""
    source = stand_in.get("call") if isinstance(stand_in, dict) else None
    if not (isinstance(source, int) and 0 <= source < position):
        raise ValueError(f"call {position} repeats what call {source!r} holds, which comes no earlier")
    return source
