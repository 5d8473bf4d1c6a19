import asyncio

import pytest

from astuner.core.task import JudgeOutput, Task, WorkflowOutput
from astuner.default_plugins.exact_judge import ExactJudge, ExactJudgeSettings


def _verdict(answer: str | None, **output: object) -> JudgeOutput:
    judge = ExactJudge(ExactJudgeSettings())
    metadata = {} if answer is None else {"answer": answer}
    return asyncio.run(judge.judge(Task(task_id="t", metadata=metadata), WorkflowOutput(**output)))


def _judge(answer: str, **output: object) -> tuple[float, bool]:
    result = _verdict(answer, **output)
    return result.reward, result.is_success


@pytest.mark.parametrize(
    ("prediction", "reference", "ok"),
    [
        ("42", "42", True),
        (" 42. ", "42", True),
        ("1,234", "1234", True),
        ("$5.00", "5", True),
        ("42.0", "#### 42", True),
        ("Paris", "paris", True),
        ("41", "42", False),
        ("forty-two", "42", False),
    ],
)
def test_final_answer_matching(prediction: str, reference: str, ok: bool) -> None:
    assert _judge(reference, metadata={"final_answer": prediction}) == (float(ok), ok)


def test_response_text_and_its_last_boxed_answer() -> None:
    assert _judge("12", response="12") == (1.0, True)
    assert _judge("12", response=r"First \boxed{10}, then \boxed{12}.") == (1.0, True)
    assert _judge("12", response="The answer is 13.") == (0.0, False)


def test_no_answer_scores_zero() -> None:
    result = _verdict("1")
    assert (result.reward, result.is_success) == (0.0, False)
    assert result.metrics == {"correct": 0.0, "no_answer": 1.0}
    assert _verdict(None, response="1").metrics == {"correct": 0.0, "no_answer": 1.0}  # no reference


def test_every_compared_run_reports_correct_and_no_answer() -> None:
    """Reported on every run, so a step's mean is the share of runs, not 1.0 from the few that said so."""
    assert _verdict("12", response="12").metrics == {"correct": 1.0, "no_answer": 0.0}
    assert _verdict("12", response="13").metrics == {"correct": 0.0, "no_answer": 0.0}
    assert _verdict("12", reward=1.0).metrics == {}  # the workflow's own reward: nothing compared


def test_reward_from_the_workflow_is_honoured() -> None:
    assert _judge("1", reward=0.25, metadata={"final_answer": "999"}) == (0.25, True)
    assert _judge("1", reward=0.0, is_success=False) == (0.0, False)
    assert _judge("1", reward=[0.0, 1.0]) == ([0.0, 1.0], True)
