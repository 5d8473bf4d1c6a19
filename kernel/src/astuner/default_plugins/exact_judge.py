"""Judge `exact`: the normalised final answer equals the reference.

Reads the prediction from `WorkflowOutput.metadata["final_answer"]` (or the
response text, using its last `\\boxed{...}` when the whole text does not
match), and the reference from the task's answer (GSM8K's `#### 42` form
understood). Numbers compare numerically, so "1,234" equals "1234.0". A
reward the workflow returned itself is honoured as is.

Every run it compares reports the metrics `correct` and `no_answer` (0 or
1; `no_answer` also when the task has no reference), so their means per
step (`train/judge/correct`, ...) are shares of the compared runs. A run
whose workflow returned its own reward reports neither: nothing was compared.
"""

from __future__ import annotations

import math
import re

from pydantic import BaseModel, ConfigDict, Field

from astuner.core.task import JudgeOutput, Task, WorkflowOutput
from astuner.hookspecs import Register, hookimpl

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


class ExactJudgeSettings(BaseModel):
    """`task_judge.exact`."""

    model_config = ConfigDict(extra="forbid")

    answer_field: str = Field("answer", description="Task metadata field with the reference.")
    case_sensitive: bool = Field(False, description="Compare text answers case-sensitively.")
    tolerance: float = Field(1e-6, ge=0, description="Absolute tolerance for numeric answers.")


def normalise(text: str, case_sensitive: bool = False) -> str:
    """Strip what does not change an answer: spacing, `$`, thousands commas, a final period."""
    text = text.strip()
    if "####" in text:
        text = text.rsplit("####", 1)[1].strip()
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    text = text.replace("$", "").strip().rstrip(".").strip()
    text = re.sub(r"\s+", " ", text)
    return text if case_sensitive else text.lower()


def _as_number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


class ExactJudge:
    def __init__(self, settings: ExactJudgeSettings) -> None:
        self.settings = settings

    def matches(self, prediction: str, reference: str) -> bool:
        s = self.settings
        a, b = normalise(prediction, s.case_sensitive), normalise(reference, s.case_sensitive)
        if a == b:
            return True
        x, y = _as_number(a), _as_number(b)
        return x is not None and y is not None and abs(x - y) <= s.tolerance

    async def judge(self, task: Task, output: WorkflowOutput) -> JudgeOutput:
        if output.reward is not None:
            reward = output.reward
            total = sum(reward) if isinstance(reward, list) else reward
            success = output.is_success if output.is_success is not None else total > 0
            return JudgeOutput(reward=reward, is_success=success)
        reference = task.metadata.get(self.settings.answer_field)
        candidates = []
        if output.metadata.get("final_answer") is not None:
            candidates.append(str(output.metadata["final_answer"]))
        elif output.response_text:
            candidates.append(output.response_text)
            boxed = _BOXED.findall(output.response_text)
            if boxed:
                candidates.append(boxed[-1])
        if reference is None or not candidates:
            return JudgeOutput(reward=0.0, is_success=False, metrics={"correct": 0.0, "no_answer": 1.0})
        ok = any(self.matches(c, str(reference)) for c in candidates)
        metrics = {"correct": float(ok), "no_answer": 0.0}
        return JudgeOutput(reward=1.0 if ok else 0.0, is_success=ok, metrics=metrics)


@hookimpl
def register_judges(register: Register) -> None:
    register(
        "exact",
        ExactJudge,
        settings=ExactJudgeSettings,
        summary="Normalised exact/numeric match of final_answer against the task's answer.",
    )
