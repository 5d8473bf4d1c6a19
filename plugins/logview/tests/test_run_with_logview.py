"""`astuner run --with-logview` / `--keep-logview`: the viewer serves the run's folder while it runs."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from astuner_logview.plugin import serve_run
from logview_process import printed_url
from logview_records import TASKS, debug_config, logview_plugins
from typer.testing import CliRunner

from astuner import hookimpl
from astuner.cli import make_app
from astuner.errors import AstunerError


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_viewer_serves_during_the_run_and_stops_after(write_config) -> None:
    port = free_port()
    seen: dict[str, object] = {}

    class PeekBackbone:
        """Asks the viewer, from inside the run, what it sees."""

        def run(self, ctx) -> None:
            seen["runs"] = httpx.get(f"http://127.0.0.1:{port}/api/runs", timeout=30).json()["runs"]
            seen["folder"] = ctx.experiment.path

    def register_backbones(register):
        register("peek", PeekBackbone)

    plugins = logview_plugins()
    plugins.add(SimpleNamespace(register_backbones=hookimpl(register_backbones)), name="peek")
    conf = write_config({})
    args = ["run", "--conf", str(conf), "--backbone", "peek", "--with-logview", "--logview-port", str(port)]
    result = CliRunner().invoke(make_app(plugins), args)
    assert result.exit_code == 0, result.output
    assert f"log viewer: http://127.0.0.1:{port}/" in result.output
    (run,) = seen["runs"]
    assert run["id"] == "." and run["backbone"] == "peek"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/api/runs", timeout=2)


def test_a_taken_port_stops_the_run_before_it_starts(write_config) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        conf = write_config({})
        args = ["run", "--conf", str(conf), "--with-logview", "--logview-port", str(port)]
        result = CliRunner().invoke(make_app(logview_plugins()), args)
    assert result.exit_code == 1
    assert f"127.0.0.1:{port}" in result.output and "--port" in result.output


def test_the_companion_takes_a_port_number(tmp_path: Path) -> None:
    # `astuner eval --with-logview VALUE` hands VALUE over as it was typed
    with (
        pytest.raises(AstunerError, match=r"takes a port number .*, not 'eight'"),
        serve_run("eight", tmp_path),
    ):
        pass


def test_the_companion_is_listed_in_the_run_help() -> None:
    result = CliRunner().invoke(make_app(logview_plugins()), ["run", "--help"])
    assert "--with-logview: the rollout log viewer on the run's folder" in result.output


@pytest.mark.slow
def test_keep_logview_serves_the_finished_run_until_interrupted(tmp_path: Path, tokenizer_dir: Path) -> None:
    conf = debug_config(tmp_path, tokenizer_dir, "kept", "calc_agent", TASKS[:2], repeat=2)
    script = textwrap.dedent(
        """
        import signal
        import sys
        sys.path.insert(0, sys.argv[1])
        # Ctrl-C must arrive even where this test runs as a shell's background job (SIGINT ignored).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from pathlib import Path
        from logview_records import scripted_plugins
        from astuner.cli import make_app

        app = make_app(scripted_plugins(Path(sys.argv[2])))
        app(["run", "--conf", sys.argv[3], "--backbone", "debug", "--keep-logview", "--logview-port", "0"])
        """
    )
    here = str(Path(__file__).parent)
    proc = subprocess.Popen(
        [sys.executable, "-c", script, here, str(tokenizer_dir), str(conf)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _, url = printed_url(proc, "stays at")
        page = httpx.get(url + "api/trajectories", params={"run": "."}, timeout=30).json()
        assert page["total"] == 4
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
