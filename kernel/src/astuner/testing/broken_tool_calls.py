"""A scripted rollout in which the model writes one good and one broken tool call.

Every agent framework astuner supports is tested with the same script
(`respond`, for a `ScriptedEngine` with a Qwen2.5-style tokenizer and the
`hermes` tool parser) and the same checks (`check_rollout`):

1. the model calls `multiply(3, 4)` correctly; the framework runs the tool;
2. it writes a tool call whose JSON is cut off; astuner hands that back as
   plain assistant text, so the framework ends its reply without error;
3. the workflow asks a follow-up question (`FOLLOW_UP`) in the same
   conversation and the model answers `\\boxed{12}`.

The turn is read from the prompt (how many assistant turns it holds), so
the script needs no state and any framework's retries see the same reply.
"""

from __future__ import annotations

import json
from typing import Any

from astuner.core.metrics import rollout_metrics
from astuner.core.trajectory import LLMCall, Trajectory

QUESTION = "What is 3 times 4? Use the multiply tool."
FOLLOW_UP = "Your last tool call was cut off. Give the final answer now."
ANSWER = "12"
SYSTEM_PROMPT = "You multiply numbers with the multiply tool. Answer within \\boxed{}."

VALID_CALL = '<tool_call>{"name": "multiply", "arguments": {"a": 3, "b": 4}}</tool_call>'
BROKEN_FRAGMENT = '{"name": "multiply", "arguments": {"a": 3,'
BROKEN_CALL = f"<tool_call>{BROKEN_FRAGMENT}</tool_call>"
FINAL_ANSWER = "3 times 4 is \\boxed{12}."

MULTIPLY_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "multiply",
        "description": "Multiply two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}

_ASSISTANT_TURN = "<|im_start|>assistant"


def respond(prompt: str) -> str:
    """The model's reply to a ChatML prompt: good call, broken call, then the final answer."""
    earlier_turns = prompt.count(_ASSISTANT_TURN) - 1  # the last one is the generation prompt
    return (VALID_CALL, BROKEN_CALL)[earlier_turns] if earlier_turns < 2 else FINAL_ANSWER


def check_rollout(trajectory: Trajectory, prefix: str = "rollout") -> None:
    """Assert that the rollout survived the broken call and was recorded as the contract says."""
    assert trajectory.error is None, trajectory.error
    assert len(trajectory.calls) == 3, [call.text for call in trajectory.calls]
    good, broken, final = trajectory.calls

    (tool_call,) = good.tool_calls
    assert (tool_call.name, json.loads(tool_call.arguments)) == ("multiply", {"a": 3, "b": 4})
    answers = [m for m in broken.messages if m["role"] == "tool" and m.get("tool_call_id") == tool_call.id]
    assert [m["content"] for m in answers] == ["12"], broken.messages  # the framework ran the tool

    assert broken.tool_calls == [] and broken.tool_parse_error, broken
    echoed = _assistant_messages(final)[-1]  # the broken reply, as the agent kept it in its history
    assert BROKEN_FRAGMENT in echoed["content"] and not echoed.get("tool_calls"), echoed
    assert final.content == FINAL_ANSWER and not final.tool_calls
    assert (trajectory.reward, trajectory.is_success) == (1.0, True)

    metrics = rollout_metrics([trajectory], prefix)
    assert metrics[f"{prefix}/replies_with_tool_call"] == metrics[f"{prefix}/tool_calls_per_reply"] == 1 / 3
    assert metrics[f"{prefix}/episodes_with_tool_call"] == 1.0
    assert metrics[f"{prefix}/tool_parse_failure_rate"] == 1 / 3
    assert metrics[f"{prefix}/tool_parse_failures"] == 1
    assert metrics[f"{prefix}/tool_calls_executed"] == 1


def _assistant_messages(call: LLMCall) -> list[dict[str, Any]]:
    return [m for m in call.messages if m["role"] == "assistant"]
