"""The judge: reward 1.0 when the agent's answer names the right city, else 0.0.

The function form of a judge: `task` is the task's row (its `answer`, the
city, is the jsonl line's `answer` field), `response` the text the workflow
returned. Whether and how often the agent called its tools astuner counts
by itself (the `tool use` line of debug and eval), so the reward is the
answer's alone.
"""

from __future__ import annotations

from astuner import JudgeOutput


async def judge(task: dict, response: str | None, auxiliary_models: dict | None = None) -> JudgeOutput:
    correct = task["answer"].lower() in (response or "").lower()
    return JudgeOutput(reward=float(correct), is_success=correct)
