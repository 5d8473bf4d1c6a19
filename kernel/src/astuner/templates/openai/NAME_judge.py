"""The judge: full reward for the right number, a little for using the tool at all.

A judge class (astuner creates it once, with no arguments) whose
`judge(task, output)` sees the whole `WorkflowOutput`, here the answer the
agent submitted (`metadata["final_answer"]`). The small reward for a wrong
but submitted answer teaches the tool-call format first; set
`FORMAT_REWARD = 0` once the agent has learnt it.
"""

from __future__ import annotations

from astuner import JudgeOutput, Task, WorkflowOutput

FORMAT_REWARD = 0.1


def as_number(value: object) -> float | None:
    try:
        return float(str(value).strip().replace(",", ""))
    except ValueError:
        return None


class SubmittedAnswerJudge:
    async def judge(self, task: Task, output: WorkflowOutput) -> JudgeOutput:
        submitted = output.metadata.get("final_answer")
        if submitted is None:
            return JudgeOutput(reward=0.0, is_success=False, metrics={"submitted": 0.0})
        value, expected = as_number(submitted), as_number(task.answer)
        correct = value is not None and expected is not None and abs(value - expected) < 1e-6
        return JudgeOutput(
            reward=1.0 if correct else FORMAT_REWARD, is_success=correct, metrics={"submitted": 1.0}
        )
