"""Demonstrations: written conversations turned into trajectories, token for token as a rollout would be.

A demonstration is one OpenAI-style conversation (`{"messages": [...],
"tools": [...]}`) whose assistant turns are what the model should have
written. Each assistant turn becomes one recorded call of a
`ContextTracker`: the prompt is built exactly as for a live call (same chat
template, same tool format and demonstration, same cumulative context), and
the "response" is the assistant turn as the template writes it, closed by
the end-of-turn token the model would have generated. So a model trained on
a demonstration learns the very tokens it is later sampled on, and the
trajectory goes through the same merge, masks, records and viewer as a
rollout.

A turn that does not read back as written (its tool calls do not parse in
the format the model is prompted with) is an error naming the line and the
turn: training on it would teach a format the parser cannot read.

Message content is text, here as everywhere in astuner: an assistant turn
that spells out a special token (`<|im_end|>`) is trained as those
characters, the tokens a model writing that text would generate, never as
the control token (which would end the turn early) nor as anything else.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from astuner.core.chat import Message, normalize_messages
from astuner.core.tokenizer import ChatTokenizer
from astuner.core.toolcalls import decode_arguments
from astuner.core.tracker import ContextTracker, PreparedCall, TrackerSettings
from astuner.core.trajectory import LLMCall, Trajectory
from astuner.errors import AstunerError

ROLES = ("system", "user", "assistant", "tool")
# Far more than a conversation that fits a model's context takes; the bound keeps one runaway line
# (a whole dump on one line) from being read, parsed and tokenised whole: a 200 MB line took 19 GB.
MAX_LINE_BYTES = 8 * 2**20


class DemonstrationError(AstunerError):
    """A demonstration that cannot be turned into trainable tokens."""


def reply_ids(tracker: ContextTracker, prepared: PreparedCall, reply: Message) -> list[int]:
    """The token ids of `reply` as the model would generate them after the prepared prompt.

    The prompt is the template over the history with the generation prompt,
    as `prepare` rendered it; the template is rendered again over `history +
    [reply]` without it, and the reply is what that adds, up to and including
    the end-of-turn token.
    """
    tokenizer = tracker.tokenizer
    history, tools = prepared.messages, prepared.tools
    prompt = prepared.rendered or tracker.render(history, tools, True)
    full = tracker.render([*history, reply], tools, False)
    if not full.startswith(prompt):
        raise DemonstrationError(
            "the chat template renders the conversation before this assistant turn differently once the "
            "turn is added, so the turn cannot be cut out as generated tokens"
        )
    rest = full[len(prompt) :]
    end = rest.find(tokenizer.end_of_turn)
    if end < 0:
        raise DemonstrationError(f"the template closes the assistant turn without '{tokenizer.end_of_turn}'")
    return [*tokenizer.encode(rest[:end]), tokenizer.end_of_turn_id]


def demonstration_trajectory(
    tokenizer: ChatTokenizer,
    settings: TrackerSettings,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    *,
    trajectory_id: str = "demonstration",
    agent_name: str = "default",
) -> Trajectory:
    """One trajectory whose calls are the assistant turns of `messages` (see the module doc)."""
    _check_roles(messages)
    msgs = normalize_messages(messages)
    tool_list = [dict(t) for t in tools] if tools else None
    tracker = ContextTracker(tokenizer, settings)
    turns = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    if not turns:
        raise DemonstrationError("it has no assistant turn to learn from")
    for i in turns:
        prepared = tracker.prepare(msgs[:i], tool_list, agent_name)
        if prepared.stop_reason is not None:
            # A prompt too long by its size alone is not encoded (core.token_bound): no count to give.
            tokens = len(prepared.prompt_ids) or f"over {settings.max_model_len:,}"
            raise DemonstrationError(
                f"assistant turn {i}: the prompt leaves no room for a reply within rollout.max_model_len "
                f"({tokens} prompt tokens)"
            )
        try:
            ids = reply_ids(tracker, prepared, msgs[i])
        except DemonstrationError as exc:
            raise DemonstrationError(f"assistant turn {i}: {exc}") from None
        call = tracker.record(prepared, ids, None, "stop")
        _check_reads_back(call, msgs[i], i)
    return tracker.trajectory(trajectory_id, task_id=trajectory_id, group_id=trajectory_id)


def _check_roles(messages: Sequence[Any]) -> None:
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            found = f"is {type(message).__name__}, not an object"
        elif message.get("role") in ROLES:
            continue
        else:
            found = f"has role {message['role']!r}" if "role" in message else "has no role"
        raise DemonstrationError(
            f"message {i} {found}. A demonstration's messages are objects whose role is one of "
            f"{', '.join(ROLES)}, the roles chat templates render: give it one of those, "
            "or drop the message."
        )


def _check_reads_back(call: LLMCall, turn: Message, index: int) -> None:
    wanted = [
        (tc["function"]["name"], decode_arguments(tc["function"]["arguments"]))
        for tc in turn.get("tool_calls") or []
    ]
    got = [(tc.name, decode_arguments(tc.arguments)) for tc in call.tool_calls]
    if wanted != got or call.tool_parse_error:
        why = f" ({call.tool_parse_error})" if call.tool_parse_error else ""
        raise DemonstrationError(
            f"assistant turn {index}: the model would write it as {call.text!r}, which the tool-call parser "
            f"reads as {got or 'no tool call'}{why}, not as {wanted or 'no tool call'}. Check the tool "
            "call's name and JSON arguments, and context_tracker.tool_parser against model.tool_format"
        )


class JsonLine(NamedTuple):
    """A non-blank line of a JSON-lines file: its number, its value, and the file's bytes read through it."""

    line: int
    value: Any
    read_bytes: int


def read_json_lines(path: Path, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[JsonLine]:
    """The non-blank lines of a JSON-lines file, read one at a time, never more than `max_line_bytes`
    of one; a line that is longer, not UTF-8 or not JSON is an `AstunerError` naming file and line."""
    read = 0
    with path.open("rb") as lines:
        for number, raw in enumerate(iter(lambda: lines.readline(max_line_bytes + 1), b""), 1):
            read += len(raw)
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                raise AstunerError(
                    f"{path}, line {number}: longer than {max_line_bytes:,} bytes, the most one line may "
                    "hold. A demonstration or a recorded trajectory is one conversation that fits the "
                    "model's context (rollout.max_model_len tokens), far less than that: split the line, "
                    "or cut what the model never sees whole (tool outputs are clipped to "
                    "rollout.max_env_len tokens anyway)."
                )
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise AstunerError(
                    f"{path}, line {number}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column "
                    f"{exc.start + 1}). Save the file as UTF-8."
                ) from None
            if not text.strip():
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise AstunerError(f"{path}, line {number}: not JSON ({exc.msg}).") from None
            yield JsonLine(number, value, read)


class Demonstration(NamedTuple):
    """One demonstration: its line, conversation and tools, and the file's bytes read through it."""

    line: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    read_bytes: int


def read_demonstrations(path: Path, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[Demonstration]:
    """Each demonstration of a demonstrations file, streamed (see `read_json_lines`); a line that is not
    one is a `DemonstrationError` naming file and line."""
    for number, row, read in read_json_lines(path, max_line_bytes):
        messages = row.get("messages") if isinstance(row, dict) else None
        if not isinstance(messages, list) or not messages:
            raise DemonstrationError(
                f"{path}, line {number}: a demonstration is an object with a non-empty 'messages' "
                "list (OpenAI chat messages) and optional 'tools', e.g. "
                '{"messages": [{"role": "user", ...}, {"role": "assistant", ...}]}.'
            )
        tools = row.get("tools") or None
        if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
            raise DemonstrationError(
                f"{path}, line {number}: 'tools' is a list of tool objects (OpenAI's "
                '{"type": "function", "function": {...}}), not ' + f"{str(tools)[:80]!r}."
            )
        yield Demonstration(number, messages, tools, read)
