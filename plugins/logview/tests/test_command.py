"""`astuner logview` and `start_logview`: start, serve, refuse bad input, stop."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
from astuner_logview.server import start_logview
from logview_process import printed_url
from logview_records import logview_plugins
from typer.testing import CliRunner

from astuner.cli import make_app
from astuner.errors import AstunerError


def app_with_logview():
    return make_app(logview_plugins())


def test_command_is_listed() -> None:
    result = CliRunner().invoke(app_with_logview(), ["logview", "--help"])
    assert result.exit_code == 0
    assert "--port" in result.output and "--host" in result.output
    assert "<bool>" not in result.output  # plain click help, like the kernel's commands


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app_with_logview(), ["logview", str(tmp_path / "nope"), "--port", "0"])
    assert result.exit_code == 1
    assert f"{tmp_path / 'nope'} is not a folder" in result.output


def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(AstunerError, match=rf"127\.0\.0\.1:{port}.*--port"):
            start_logview(tmp_path, port=port)


def test_handle_serves_until_stopped(record_root: Path) -> None:
    viewer = start_logview(record_root, port=0)
    assert viewer.url.startswith("http://127.0.0.1:")
    assert httpx.get(viewer.url, timeout=10).status_code == 200
    viewer.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(viewer.url, timeout=2)


@pytest.mark.slow
def test_command_serves_until_interrupted(record_root: Path) -> None:
    script = textwrap.dedent(
        """
        import signal
        import sys
        from astuner.cli import make_app
        from astuner.plugins import Plugins

        # Ctrl-C must arrive even where this test runs as a shell's background job (SIGINT ignored).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        make_app(Plugins())(["logview", sys.argv[1], "--port", "0"])
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(record_root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | {"ASTUNER_LOAD_PLUGINS": "logview"},  # the installed plugin, by its entry point
    )
    try:
        lines, url = printed_url(proc, "open")
        assert "2 run(s) under" in lines[0], lines
        assert url.startswith("http://127.0.0.1:")
        runs = httpx.get(url + "api/runs", timeout=30).json()["runs"]
        assert {r["experiment"] for r in runs} == {"calc", "long"}
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
