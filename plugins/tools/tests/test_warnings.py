"""The no-sandbox warning: once per process, naming what is missing; and what still holds without one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from astuner_tools import backends, run_python_sync
from sandbox_parts import run
from structlog.testing import capture_logs

from astuner.api import get_logger


@pytest.fixture
def logs() -> Iterator[list[dict]]:
    """What is logged during the test (astuner.testing starts each test with nothing warned yet)."""
    get_logger()  # its first use configures structlog, which would drop the capture's processors
    with capture_logs() as captured:
        yield captured


def test_no_sandbox_is_said_once_with_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, logs: list[dict]
) -> None:
    reasons = {"bwrap": "bwrap is not installed", "unshare": "unshare failed: Operation not permitted"}
    monkeypatch.setattr(backends, "probe", lambda sandbox: reasons.get(sandbox))
    for _ in range(2):
        result = run_python_sync("print(6 * 7)")
        assert (result.sandbox, result.stdout) == ("none", "42\n")
    warnings = [log["event"] for log in logs if log["log_level"] == "warning"]
    (warning,) = [w for w in warnings if "WITHOUT a sandbox" in w]
    assert "bwrap is not installed" in warning and "Operation not permitted" in warning


def test_without_a_sandbox_the_limits_still_apply() -> None:
    result = run("while True: pass", "none", timeout=0.5)
    assert result.timed_out and result.returncode == -1


def test_without_any_namespace_only_pythons_sockets_refuse(
    monkeypatch: pytest.MonkeyPatch, host_listener: tuple[str, int]
) -> None:
    monkeypatch.setattr("astuner_tools.run.NAMESPACES", False)  # as in a container that forbids them
    code = f"""
import socket, _socket
try:
    socket.create_connection({host_listener!r}, timeout=2)
except OSError as error:
    print(error)
raw = _socket.socket()
raw.settimeout(2)
raw.connect({host_listener!r})
print("raw connected")
"""
    result = run(code, "none")
    assert "network python-only" in result.notes
    refused = "network access is disabled in execute_python_code"
    assert result.stdout.splitlines() == [refused, "raw connected"]  # `_socket` gets past: the gap
