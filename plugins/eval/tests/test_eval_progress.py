"""`astuner eval` with its output in a file says how its rollouts go while they run, and writes each
one to `rollouts/eval.jsonl` as it ends.

A real `astuner eval` in a child process (the installed plugins, and a
scripted engine), its stdout and stderr redirected to one file, one rollout
at a time (`astuner.testing.progress`): each rollout's workflow notes what
the output file and the rollout file held as it started, what a user tailing
the files would have seen mid-run.
"""

from __future__ import annotations

import pytest

from astuner.testing.progress import RedirectedRun, redirected_run

ROLLOUTS = 4


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RedirectedRun:
    """The notes of each rollout (in the order they ran) and the run's whole output, in a file."""
    return redirected_run(
        tmp_path_factory.mktemp("redirected"),
        ["eval", "--conf", "slow.yaml", "--max-tasks", str(ROLLOUTS)],
        lambda tok: (
            "astuner:\n"
            f"  model: {{path: '{tok}'}}\n"
            "  task_reader: {type: arith}\n"
            "  rollout: {agentscope_workflow: 'slow_workflow->slow', engine: scripted, max_env_worker: 1}\n"
        ),
        ROLLOUTS,
        entry_points=True,
    )


def test_progress_lines_come_at_a_steady_interval_while_the_rollouts_run(run: RedirectedRun) -> None:
    run.check_progress("eval", ROLLOUTS)


def test_each_trajectory_is_in_the_rollout_file_as_soon_as_its_run_ends(run: RedirectedRun) -> None:
    assert [note["records"] for note in run.notes] == list(range(ROLLOUTS)), run.notes
