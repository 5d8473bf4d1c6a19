"""The README's HTTP API section: every route of the app documented, with its parameters and a working
curl example; and the address `astuner logview` prints answers at its first request."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import astuner_logview.server as server_module
import httpx
import pytest
from astuner_logview.app import create_app
from astuner_logview.server import start_logview
from fastapi.routing import APIRoute
from logview_process import printed_url

from astuner.api import ThreadedServer

README = Path(__file__).resolve().parents[1] / "README.md"


def api_section() -> str:
    text = README.read_text()
    start = text.index("\n## HTTP API\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def documented() -> dict[str, str]:
    """{path: its entry} for each `### \\`GET /path\\`` heading of the section."""
    parts = re.split(r"^### `GET (\S+)`\n", api_section(), flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def curl_urls() -> dict[str, str]:
    """{path: the URL of its curl example}."""
    out = {}
    for path, entry in documented().items():
        (url,) = re.findall(r'^curl -s "([^"]+)"$', entry, re.MULTILINE)
        out[path] = url
    return out


def test_every_route_is_documented_with_its_parameters(tmp_path: Path) -> None:
    routes = [r for r in create_app(tmp_path).routes if isinstance(r, APIRoute)]
    assert {r.path for r in routes} == set(documented()), "document each route in README's HTTP API section"
    for route in routes:
        entry = documented()[route.path]
        assert list(route.methods) == ["GET"], route.path
        for param in route.dependant.query_params:
            assert f"`{param.name}`" in entry, (route.path, param.name)
        assert curl_urls()[route.path].startswith(f"http://127.0.0.1:8181{route.path.split('{')[0]}")


def test_the_curl_examples_answer(record_root: Path, calc_run: Path, serve) -> None:
    viewer = serve(record_root)
    run = calc_run.relative_to(record_root).as_posix()
    rollout = sorted(p.name for p in (calc_run / "rollouts").glob("*.jsonl"))[0]
    for path, url in curl_urls().items():
        url = url.replace("http://127.0.0.1:8181", f"http://127.0.0.1:{viewer.port}")
        url = url.replace("$RUN", run).replace("step_2.jsonl", rollout)
        answer = httpx.get(url, timeout=60)
        assert answer.status_code == 200, (path, url, answer.text[:300])
    assert httpx.get(f"{viewer.url}api/health", timeout=10).json() == {"status": "ok"}


class _ReportsStartedAtOnce(ThreadedServer):
    """A server whose start returns a while before it listens, as on a loaded machine."""

    def _serve(self) -> None:
        time.sleep(0.5)
        super()._serve()

    def start(self, timeout: float = 10.0) -> ThreadedServer:
        self._thread.start()
        return self


def test_start_logview_returns_only_once_the_server_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_module, "ThreadedServer", _ReportsStartedAtOnce)
    viewer = start_logview(tmp_path, port=0)
    try:
        with socket.create_connection(("127.0.0.1", viewer.port), timeout=5):
            pass  # refused if nothing listens yet
        assert httpx.get(viewer.url, timeout=10).status_code == 200
    finally:
        viewer.stop()


def test_the_printed_address_answers_at_once(record_root: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from astuner.cli import make_app; from astuner.plugins import Plugins; "
            "make_app(Plugins())(['logview', sys.argv[1], '--port', '0'])",
            str(record_root),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | {"ASTUNER_LOAD_PLUGINS": "logview"},
    )
    try:
        _, url = printed_url(proc, "open")
        assert httpx.get(url, timeout=30).status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
