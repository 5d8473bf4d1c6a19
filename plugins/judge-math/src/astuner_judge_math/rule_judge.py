"""Judge `math_answer`: the final answer equals the task's reference, by rule.

The prediction is `WorkflowOutput.metadata["final_answer"]` when the
workflow set one, else the response text; either way it goes through
`extract_prediction` (last `\\boxed{}`, then `####`, then the whole text,
then what math-verify extracts from prose, then the last number). The
reference is the task's `answer_field` (GSM8K's `#### 72` understood). A
reward the workflow returned itself is honoured as is.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from astuner.api import JudgeOutput, Task, WorkflowOutput
from astuner_judge_math.compare import equivalent
from astuner_judge_math.extract import extract_prediction, extract_reference


class MathAnswerSettings(BaseModel):
    """`task_judge.math_answer`."""

    model_config = ConfigDict(extra="forbid")

    answer_field: str = Field("answer", description="Task metadata field holding the reference.")
    rel_tol: float = Field(1e-9, ge=0, description="Relative tolerance between numeric answers.")
    abs_tol: float = Field(1e-6, ge=0, description="Absolute tolerance between numeric answers.")
    symbolic: bool = Field(True, description="Check non-numeric answers symbolically with math-verify.")
    symbolic_timeout_s: float = Field(
        2,
        gt=0,
        description="Time limit in seconds of one symbolic check, and of extracting an answer from prose; "
        "past it the check is stopped (on any thread) and finds no match.",
    )
    reward_correct: float = Field(1.0, description="Reward of a correct answer.")
    reward_wrong: float = Field(0.0, description="Reward of a wrong or missing answer.")


@dataclass
class RuleVerdict:
    """What the rule saw and concluded."""

    prediction: str | None
    reference: str | None
    correct: bool


def honoured(output: WorkflowOutput) -> JudgeOutput | None:
    """The workflow's own reward, when it returned one."""
    if output.reward is None:
        return None
    reward = output.reward
    total = sum(reward) if isinstance(reward, list) else reward
    success = output.is_success if output.is_success is not None else total > 0
    return JudgeOutput(reward=reward, is_success=success)


class MathAnswerJudge:
    def __init__(self, settings: MathAnswerSettings | None = None) -> None:
        self.settings = settings or MathAnswerSettings()

    def check(self, task: Task, output: WorkflowOutput) -> RuleVerdict:
        s = self.settings
        final = output.metadata.get("final_answer")
        prediction = extract_prediction(
            str(final) if final is not None else output.response_text, timeout_s=s.symbolic_timeout_s
        )
        reference = extract_reference(task.metadata.get(s.answer_field))
        correct = (
            prediction is not None
            and reference is not None
            and equivalent(
                prediction,
                reference,
                rel_tol=s.rel_tol,
                abs_tol=s.abs_tol,
                symbolic=s.symbolic,
                timeout_s=s.symbolic_timeout_s,
            )
        )
        return RuleVerdict(prediction, reference, correct)

    def verdict(self, correct: bool, metrics: dict[str, float]) -> JudgeOutput:
        s = self.settings
        return JudgeOutput(
            reward=s.reward_correct if correct else s.reward_wrong, is_success=correct, metrics=metrics
        )

    async def judge(self, task: Task, output: WorkflowOutput) -> JudgeOutput:
        own = honoured(output)
        if own is not None:
            return own
        rule = self.check(task, output)
        return self.verdict(rule.correct, rule_metrics(rule))


def rule_metrics(rule: RuleVerdict) -> dict[str, float]:
    return {
        "judge/no_answer": float(rule.prediction is None),
        "judge/no_reference": float(rule.reference is None),
        "judge/rule_correct": float(rule.correct),
    }
