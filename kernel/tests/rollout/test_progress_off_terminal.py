"""A run whose output goes to a file says how its rollouts go while they run, and records each one as
it ends.

A real `astuner run --backbone debug` in a child process, its stdout and
stderr redirected to one file, one rollout at a time
(`astuner.testing.progress`): each rollout's workflow notes what the output
file and the rollout file held as it started, what a user tailing the files
would have seen mid-run.
"""

from __future__ import annotations

import pytest

from astuner.rollout.progress import PROGRESS_ENV, progress_every_s
from astuner.testing.progress import RedirectedRun, redirected_run

ROLLOUTS = 4


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RedirectedRun:
    """The notes of each rollout (in the order they ran) and the run's whole output, in a file."""
    return redirected_run(
        tmp_path_factory.mktemp("redirected"),
        ["run", "--conf", "slow.yaml", "--backbone", "debug"],
        lambda tok: (
            "astuner:\n"
            f"  model: {{path: '{tok}'}}\n"
            "  task_reader: {type: arith}\n"
            "  rollout: {agentscope_workflow: 'slow_workflow->slow', engine: scripted}\n"
            f"  debug: {{debug_first_n_tasks: {ROLLOUTS}, num_repeat: 1, debug_max_parallel: 1}}\n"
        ),
        ROLLOUTS,
    )


def test_progress_lines_come_at_a_steady_interval_while_the_rollouts_run(run: RedirectedRun) -> None:
    run.check_progress("debug", ROLLOUTS)


def test_each_trajectory_is_in_the_rollout_file_as_soon_as_its_run_ends(run: RedirectedRun) -> None:
    assert [note["records"] for note in run.notes] == list(range(ROLLOUTS)), run.notes


def test_the_interval_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    assert progress_every_s() == 30.0
    monkeypatch.setenv(PROGRESS_ENV, "2.5")
    assert progress_every_s() == 2.5
    for wrong in ("0", "-1", "soon", "nan"):
        monkeypatch.setenv(PROGRESS_ENV, wrong)
        with pytest.raises(Exception, match=PROGRESS_ENV):
            progress_every_s()
