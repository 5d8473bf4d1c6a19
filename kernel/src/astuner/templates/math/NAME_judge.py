"""The judge: 1.0 when the agent's final number is the task's answer, else 0.0.

The function form of a judge: `task` is the task's row, `response` what the
workflow returned. The final number is the last `\\boxed{...}` of the reply,
or, without one, its last number. Return a `JudgeOutput` (reward, success,
and any metrics you want charted).
"""

from __future__ import annotations

import re

from astuner import JudgeOutput

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def final_number(text: str) -> float | None:
    boxed = BOXED.findall(text)
    numbers = NUMBER.findall((boxed[-1] if boxed else text).replace(",", ""))
    return float(numbers[-1]) if numbers else None


async def judge(task: dict, response: str | None, auxiliary_models: dict | None = None) -> JudgeOutput:
    predicted = final_number(response or "")
    correct = predicted is not None and abs(predicted - float(task["answer"])) < 1e-6
    return JudgeOutput(
        reward=1.0 if correct else 0.0,
        is_success=correct,
        metrics={"boxed": float(bool(BOXED.search(response or "")))},
    )
