"""Tagged breakpoints: `bp("TAG")` stops in pdb only for tags `--db` enabled; others cost nothing."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from astuner import bp
from astuner.breakpoints import DB_TAGS_ENV

WORKFLOW = """
from astuner import WorkflowOutput
from vsdb import bp  # the seeds' spelling

async def stops(task, model):
    where = "before the tags"
    bp("OFF")
    where = "at tag ON"
    bp("ON")
    where = "after the tags"
    return WorkflowOutput(response=where, metadata={"final_answer": where})
"""


@pytest.fixture
def debugging_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # `--db` writes these into the environment for the run's workers: put them back after the test.
    for name in (DB_TAGS_ENV, "RAY_DEBUG", "RAY_DEBUG_POST_MORTEM"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


@pytest.fixture
def app(scripted_app):
    return scripted_app


def test_an_enabled_tag_stops_in_pdb_driven_through_stdin_and_a_disabled_one_does_not(
    app, write_config, workdir: Path, debugging_env
) -> None:
    (workdir / "stops_workflow.py").write_text(WORKFLOW)
    conf = write_config(
        {
            "task_reader": {"type": "arith"},
            "rollout": {"agentscope_workflow": "stops_workflow->stops", "engine": "scripted"},
            "debug": {"debug_first_n_tasks": 1, "num_repeat": 1},
        },
        name="bp.yaml",
    )
    result = CliRunner().invoke(
        app,
        ["run", "--conf", str(conf), "--backbone", "debug", "--db", "ON|OTHER"],
        input="p where\np 'pdb' + ' answered'\nc\n",
    )
    assert result.exit_code == 0, result.output
    assert "breakpoint tags enabled: ON, OTHER" in result.stderr
    assert "astuner: breakpoint 'ON'" in result.stderr
    # one stop (at ON, not at OFF), three commands read: two answers, then 'c'
    assert result.stdout.count("(Pdb)") == 3
    assert "'at tag ON'" in result.stdout and "'pdb answered'" in result.stdout
    assert "'before the tags'" not in result.stdout
    (records,) = (workdir / "launcher_record" / "bp").glob("*/rollouts/debug.jsonl")
    assert "after the tags" in records.read_text()  # the rollout went on after 'c'


def test_without_db_no_tag_stops(monkeypatch: pytest.MonkeyPatch, debugging_env) -> None:
    import pdb

    monkeypatch.setattr(pdb.Pdb, "set_trace", lambda *a: pytest.fail("stopped"))
    bp("ANY")  # no tags enabled at all
    monkeypatch.setenv(DB_TAGS_ENV, "OTHER|MORE")
    bp("ANY")  # enabled tags, not this one


def test_asking_whether_this_is_a_ray_worker_starts_no_ray_cluster() -> None:
    # `ray.get_runtime_context()` starts a local cluster when none is running: a tag hit in the
    # run's own process, with Ray merely imported, once left one behind in the workflow's folder.
    ray = pytest.importorskip("ray")
    from astuner.breakpoints import _in_ray_worker

    assert not ray.is_initialized()
    assert _in_ray_worker() is False
    assert not ray.is_initialized()


SWALLOWS_THE_STOP = """
from astuner import WorkflowOutput, bp

async def stops(task, model):
    try:
        bp("ON")
        where = "at tag ON"
    except BaseException:  # swallows the stop: the next bp() raises it again, without stopping
        pass
    bp("ON")
    return WorkflowOutput(response="after the tags", metadata={"final_answer": "after the tags"})
"""


@pytest.mark.parametrize("workflow", [WORKFLOW, SWALLOWS_THE_STOP], ids=["plain", "swallows-the-stop"])
def test_q_at_a_breakpoint_stops_the_run_as_the_prompt_says(
    app, write_config, workdir: Path, debugging_env, workflow: str
) -> None:
    (workdir / "stops_workflow.py").write_text(workflow)
    conf = write_config(
        {
            "task_reader": {"type": "arith"},
            "rollout": {"agentscope_workflow": "stops_workflow->stops", "engine": "scripted"},
            "debug": {"debug_first_n_tasks": 3, "num_repeat": 1, "debug_max_parallel": 1},
        },
        name="bpq.yaml",
    )
    # 'q' at the first stop; were the run to go on, the next rollouts would stop too and read EOF.
    result = CliRunner().invoke(
        app, ["run", "--conf", str(conf), "--backbone", "debug", "--db", "ON"], input="q\n"
    )
    assert result.stdout.count("(Pdb)") == 1, result.output
    assert result.exit_code == 130, result.output  # as Ctrl-C ends a run
    assert "stopping the run" in result.stderr
    (run,) = (workdir / "launcher_record" / "bpq").iterdir()
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "killed", status
    assert "stopped by the user" in status["reason"] and "'ON'" in status["reason"], status
    assert not list(run.glob("rollouts/debug.jsonl"))  # the run stopped: no rollouts were written as if done


def test_q_outside_an_event_loop_stops_that_caller_only(
    monkeypatch: pytest.MonkeyPatch, debugging_env
) -> None:
    import io

    from astuner.breakpoints import StoppedAtBreakpoint

    def stops_at_sync() -> str:
        bp("SYNC")
        return "went on"

    monkeypatch.setenv(DB_TAGS_ENV, "SYNC")
    monkeypatch.setattr("sys.stdin", io.StringIO("q\n"))
    with pytest.raises(StoppedAtBreakpoint):
        stops_at_sync()
    # A later synchronous bp() (a notebook's next cell) opens pdb again instead of raising the old stop.
    monkeypatch.setattr("sys.stdin", io.StringIO("c\n"))
    assert stops_at_sync() == "went on"
