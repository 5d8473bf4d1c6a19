"""A run that fills its disk says which file it could not write, and its status does not stay `running`.

The disk is real: a 64 KiB tmpfs mounted in a private mount namespace of a
child process (`unshare`), so nothing leaks into the host's mounts and the
mount vanishes with the child. Where mounting is not allowed the test skips.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from types import SimpleNamespace

    from pydantic import BaseModel

    from astuner import hookimpl
    from astuner.api import Trajectory
    from astuner.training import append_trajectories
    from astuner.cli import make_app
    from astuner.logs import configure_logging, get_logger
    from astuner.plugins import Plugins


    class FillSettings(BaseModel):
        pass


    class Filling:
        # Another process fills the disk, then a rollout cannot be written: that error ends the run.
        def __init__(self, settings):
            pass

        def run(self, ctx):
            try:
                (Path(sys.argv[1]) / "filler").write_bytes(b"x" * (1 << 20))
            except OSError:
                pass
            get_logger().warning("a rollout failed", traceback="x" * 5000)  # more than the log's page holds
            for n in range(10_000):
                trajectory = Trajectory(trajectory_id=str(n), metadata={"pad": "x" * 2000})
                append_trajectories(ctx.experiment.rollouts / "step_1.jsonl", [trajectory])


    def register_backbones(register):
        register("filling", Filling, settings=FillSettings)


    plugins = Plugins(load_entry_points=False)
    plugins.add(SimpleNamespace(register_backbones=hookimpl(register_backbones)), name="filling")
    configure_logging()
    try:
        make_app(plugins)(args=["run", "--conf", sys.argv[2], "--backbone", "filling"], prog_name="astuner")
    except SystemExit as exc:
        code = exc.code
    (run,) = Path(sys.argv[1]).glob("launcher_record/full/*")
    print("REPORT " + json.dumps({
        "exit": code,
        "status": json.loads((run / "status.json").read_text()),
        "files": sorted(p.name for p in run.iterdir()),
    }))
    """
)


FILL = """
import json, sys
from pathlib import Path

disk = Path(sys.argv[1])


def fill():
    try:
        (disk / "filler").write_bytes(b"x" * (1 << 20))
    except OSError:
        pass  # the disk is now full to the last byte
"""

FAILED = FILL + textwrap.dedent(
    """
    from astuner.run_status import end_run, mark_running, read_status

    raised = None
    mark_running(disk)
    try:
        fill()
        raise RuntimeError("the judge fell over")
    except Exception as exc:
        raised = f"{type(exc).__name__}: {exc}"
        end_run(disk, exc)  # as RunLifecycle ends a run that raised
    print("REPORT " + json.dumps([raised, str(read_status(disk)), sorted(p.name for p in disk.iterdir())]))
    """
)

UNSTARTED = FILL + textwrap.dedent(
    """
    from astuner.run_status import end_run

    fill()
    ended = end_run(disk, None)  # no status.json to write over: a warning, never an error
    print("REPORT " + json.dumps([str(ended), sorted(p.name for p in disk.iterdir())]))
    """
)


def _on_small_disk(tmp_path: Path, script: str, *args: str) -> tuple[dict, str]:
    """Run `script` with a 64 KiB tmpfs at its argv[1]; its `REPORT {json}` line, and its stderr.

    `unshare` gives the child a private mount namespace (as a user, inside a
    user namespace where it may mount); where that is not allowed, the test skips.
    """
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to mount a small disk in a private mount namespace")
    namespace = (
        ["unshare", "--mount"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "--mount"]
    )
    disk = tmp_path / "disk"
    disk.mkdir()
    child = tmp_path / "child.py"
    child.write_text(script, encoding="utf-8")
    mount = 'mount -t tmpfs -o size=64k tmpfs "$1" || exit 77; shift; exec "$@"'
    result = subprocess.run(
        [*namespace, "sh", "-c", mount, "sh", str(disk), sys.executable, str(child), str(disk), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode == 77 or "unshare failed" in result.stderr:
        pytest.skip(f"cannot mount a small tmpfs here: {result.stderr.strip()}")
    reports = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    assert reports, result.stdout + result.stderr
    return json.loads(reports[-1].removeprefix("REPORT ")), result.stderr


def test_a_full_disk_names_the_records_file_and_ends_the_status(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    conf = tmp_path / "full.yaml"
    conf.write_text(f"astuner:\n  experiment_dir: {disk / 'launcher_record'}\n", encoding="utf-8")
    report, stderr = _on_small_disk(tmp_path, CHILD, str(conf))
    # The user sees the records writer's paragraph naming the file, not a bare OSError.
    assert report["exit"] == 1
    error = stderr[stderr.index("error:") :]
    assert error.startswith(f"error: Cannot write records to '{disk}/launcher_record/full/"), error
    assert "step_1.jsonl': No space left on device" in error, error
    # Above it, the log file that could not be written is one line, not a traceback per log line.
    log = f"astuner: cannot write the log file '{disk}/launcher_record/full/"
    assert stderr.count(log) == 1 and "Traceback" not in stderr and "Logging error" not in stderr, stderr
    # status.json says how the run ended, and no empty temporary copy is left beside it.
    assert report["status"]["state"] == "failed", report
    assert report["status"]["reason"].startswith("Cannot write records to"), report
    assert ".status.json.tmp" not in report["files"], report


def test_the_end_of_a_run_is_written_over_its_status_when_the_disk_has_no_room_left(tmp_path: Path) -> None:
    report, _ = _on_small_disk(tmp_path, FAILED)
    status = "failed: RuntimeError: the judge fell over"
    assert report == ["RuntimeError: the judge fell over", status, ["filler", "status.json"]]


def test_a_status_that_cannot_be_written_is_a_warning_naming_the_file(tmp_path: Path) -> None:
    report, stderr = _on_small_disk(tmp_path, UNSTARTED)
    assert report == ["finished", ["filler"]]
    path = tmp_path / "disk" / "status.json"
    assert f"Cannot write the run's status to '{path}': No space left on device" in stderr, stderr
    assert "Traceback" not in stderr, stderr
