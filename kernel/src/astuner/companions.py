"""Companion processes: services a run needs, started before it and stopped after it.

`astuner run --with-env NAME` starts the reference environment service
(`astuner envservice serve --env NAME`) at `task_reader.env_service.env_url`;
`--with-appworld` runs the seeds' `$APPWORLD_SCRIPT` in `$APPWORLD_PATH`.
Either way the run starts once `GET /healthz` answers, and the process is
stopped when the run ends or fails. The process is started in a session of
its own, so its process group id is its PID: stopping sends SIGTERM (then
SIGKILL) to that group only, which also reaches the children of a launcher
script, and never touches a process by name.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import httpx

from astuner.errors import AstunerError
from astuner.logs import get_logger

DEFAULT_ENV_URL = "http://127.0.0.1:8080"


class Companion:
    """`with Companion(name, argv, health_url=...):` runs `argv` while the block runs."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        health_url: str,
        cwd: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        log_path: str | Path | None = None,
        startup_timeout: float = 120.0,
        stop_timeout: float = 10.0,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.health_url = health_url
        self.cwd = cwd
        self.env = dict(env) if env is not None else None
        self.log_path = Path(log_path) if log_path else None
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self) -> Companion:
        """Start the process and wait until `health_url` answers 200; stops it again on failure."""
        if _healthy(self.health_url):
            raise AstunerError(
                f"Cannot start {self.name}: something already answers {self.health_url}. Stop it, or "
                "drop --with-env/--with-appworld to use the running service, or point "
                "task_reader.env_service.env_url at a free port."
            )
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.process = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=stop_with_parent(),
            )
        except OSError as exc:
            raise AstunerError(f"Cannot start {self.name} ({' '.join(self.argv)}): {exc}") from exc
        finally:
            if self.log_path:
                log.close()  # type: ignore[union-attr]
        get_logger().info("companion started", name=self.name, pid=self.process.pid, argv=self.argv)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout
        while not _healthy(self.health_url):
            code = self.process.poll()
            if code is not None:
                raise AstunerError(
                    f"{self.name} exited with code {code} before answering {self.health_url} "
                    f"(command: {' '.join(self.argv)}){self._log_hint()}."
                )
            if time.monotonic() > deadline:
                raise AstunerError(
                    f"{self.name} (PID {self.process.pid}) did not answer {self.health_url} within "
                    f"{self.startup_timeout:g} s{self._log_hint()}; it has been stopped."
                )
            time.sleep(0.2)

    def _log_hint(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        tail = self.log_path.read_text(errors="replace").strip().splitlines()[-5:]
        return f"; its log {self.log_path} ends with: " + " | ".join(tail) if tail else ""

    def stop(self) -> None:
        """SIGTERM to the process group we started, SIGKILL after `stop_timeout`; idempotent.

        Waits until no process of the group is left (a launcher script exits
        at once, the server it started may take a moment to shut down).
        """
        process, self.process = self.process, None
        if process is None:
            return
        for sig, wait in ((signal.SIGTERM, self.stop_timeout), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while _group_alive(process) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not _group_alive(process):
                break
        get_logger().info("companion stopped", name=self.name, pid=process.pid, returncode=process.poll())

    def __enter__(self) -> Companion:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def stop_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that has the kernel send the child SIGTERM when this process dies (Linux).

    A companion outlives a `kill -9` of its run otherwise, holding its port.
    `PR_SET_PDEATHSIG` fires when the thread that started the child exits,
    so companions are started from the run's main thread. Elsewhere (macOS)
    None: the run's own exit path stops them, a SIGKILL does not.
    """
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()

    def arm() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return arm


_PR_SET_PDEATHSIG = 1


def _group_alive(leader: subprocess.Popen[bytes]) -> bool:
    """Whether any process of the group `leader` leads still runs (zombies do not count)."""
    leader.poll()  # reaps the leader once it has exited
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(leader.pid, 0)
        except ProcessLookupError:
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # After the command name: state, ppid, pgrp, ...
        if fields[0] != "Z" and int(fields[2]) == leader.pid:
            return True
    return False


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _env_service_block(config: Any) -> dict[str, Any]:
    """The raw `task_reader.env_service` block (the plugin validates it when it builds the reader)."""
    return dict((getattr(config.task_reader, "model_extra", None) or {}).get("env_service") or {})


def env_service_url(config: Any) -> str:
    """`task_reader.env_service.env_url`, or the protocol's usual default."""
    return str(_env_service_block(config).get("env_url") or DEFAULT_ENV_URL).rstrip("/")


def env_service_companion(config: Any, env_name: str, log_path: str | Path | None = None) -> Companion:
    """The reference EnvService serving `env_name` where the config's reader expects it."""
    parts = urlsplit(env_service_url(config))
    if parts.scheme != "http" or not parts.hostname or parts.hostname not in ("127.0.0.1", "localhost"):
        raise AstunerError(
            f"--with-env starts the environment service on this machine, but "
            f"task_reader.env_service.env_url is {env_service_url(config)!r}; use "
            "http://127.0.0.1:<port> (or drop --with-env to use a service elsewhere)."
        )
    env_type = _env_service_block(config).get("env_type")
    if env_type and env_type != env_name:
        raise AstunerError(
            f"--with-env {env_name} serves env_type '{env_name}', but task_reader.env_service.env_type "
            f"is '{env_type}'; make them the same."
        )
    port = parts.port or 80
    argv = [sys.executable, "-m", "astuner", "envservice", "serve", "--env", env_name, "--port", str(port)]
    return Companion(
        f"environment service '{env_name}'",
        argv,
        health_url=f"http://127.0.0.1:{port}/healthz",
        log_path=log_path,
    )


def appworld_companion(
    config: Any, environ: Mapping[str, str] | None = None, log_path: str | Path | None = None
) -> Companion:
    """The seeds' AppWorld service: `$APPWORLD_SCRIPT` run by bash in `$APPWORLD_PATH`."""
    environ = os.environ if environ is None else environ
    path, script = environ.get("APPWORLD_PATH"), environ.get("APPWORLD_SCRIPT")
    if not path or not script:
        raise AstunerError(
            "--with-appworld needs APPWORLD_PATH (the unpacked AppWorld EnvService folder, e.g. "
            "/tmp/pack_all_in_one) and APPWORLD_SCRIPT (the command that starts it there, e.g. "
            "'bash EnvService/env_sandbox/appworld.sh') in the environment; "
            f"{'APPWORLD_PATH' if not path else 'APPWORLD_SCRIPT'} is not set."
        )
    if not Path(path).is_dir():
        raise AstunerError(
            f"APPWORLD_PATH={path!r} is not a folder; point it at the unpacked AppWorld service."
        )
    return Companion(
        "AppWorld environment service",
        ["bash", "-c", script],
        cwd=path,
        env=dict(environ),
        health_url=f"{env_service_url(config)}/healthz",
        log_path=log_path,
        startup_timeout=600.0,
    )


@contextmanager
def companions_for_run(
    config: Any, folder: str | Path, *, with_env: str | None = None, with_appworld: bool = False
) -> Iterator[list[Companion]]:
    """What `astuner run --with-env NAME / --with-appworld` starts, running while the block runs.

    Logs go to `folder` (the experiment folder). In the main thread SIGTERM
    is turned into SystemExit meanwhile, so a terminated run still stops
    its companions.
    """
    folder = Path(folder)
    with ExitStack() as stack:
        started: list[Companion] = []
        if with_env or with_appworld:
            stack.enter_context(_sigterm_exits())
        if with_env:
            companion = env_service_companion(config, with_env, log_path=folder / "envservice.log")
            started.append(stack.enter_context(companion))
        if with_appworld:
            companion = appworld_companion(config, log_path=folder / "appworld.log")
            started.append(stack.enter_context(companion))
        yield started


@contextmanager
def _sigterm_exits() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def exit_on_sigterm(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, exit_on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
