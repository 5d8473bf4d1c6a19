"""astuner plugin NAME: a judge that rewards a response stating the task's answer.

astuner finds this module through the `astuner` entry point in
pyproject.toml once the package is installed; `astuner plugins list` then
shows it. A config picks the judge with `task_judge.judge_protocol: NAME`
and sets its keys under `task_judge.NAME`.

Import from the kernel only `astuner.api`: it is the part of astuner that
stays stable for plugins.
"""

from __future__ import annotations

import re

from astuner.api import JudgeOutput, Register, Task, WorkflowOutput, hookimpl
from pydantic import BaseModel, ConfigDict, Field


class ContainsAnswerSettings(BaseModel):
    """`task_judge.NAME`: where the answer is, and what a match is worth."""

    # A misspelled key in the config is an error that names it, not a silently ignored setting.
    model_config = ConfigDict(extra="forbid")

    answer_field: str = Field("answer", description="Task metadata field that holds the reference answer.")
    case_sensitive: bool = Field(False, description="Match the answer's letter case too.")
    reward_correct: float = Field(1.0, description="Reward when the answer is found.")
    reward_wrong: float = Field(0.0, description="Reward otherwise.")


class ContainsAnswerJudge:
    """Reward a run whose final answer (or, without one, its response) contains the reference as a word.

    "42" is found in "The answer is 42." but not in "420".
    """

    def __init__(self, settings: ContainsAnswerSettings) -> None:
        self.settings = settings

    async def judge(self, task: Task, output: WorkflowOutput) -> JudgeOutput:
        """The verdict on one run of `task`."""
        s = self.settings
        reference = task.metadata.get(s.answer_field)
        final_answer = output.metadata.get("final_answer")
        text = str(final_answer) if final_answer is not None else output.response_text
        if reference is None or not text:
            # Nothing to compare: a wrong answer, counted so that a run's metrics show it.
            return JudgeOutput(reward=s.reward_wrong, is_success=False, metrics={"judge/no_answer": 1.0})
        word = rf"(?<!\w){re.escape(str(reference).strip())}(?!\w)"
        found = re.search(word, text, 0 if s.case_sensitive else re.IGNORECASE) is not None
        return JudgeOutput(
            reward=s.reward_correct if found else s.reward_wrong,
            is_success=found,
            metrics={"judge/no_answer": 0.0},  # reported on every run, so its mean is a share
        )


@hookimpl
def register_judges(register: Register) -> None:
    """Register the judge; a run that picks it builds it from its settings block."""
    register(
        "NAME",
        ContainsAnswerJudge,
        settings=ContainsAnswerSettings,
        summary="The task's answer appears as a word in the final answer or response.",
    )
