"""Companion processes: services a run needs, started before it and stopped after it.

A plugin provides a companion through the `register_companions` hook; the
user asks for it with `astuner run --with-NAME [VALUE]` (or `astuner eval
...`), e.g. an environment service the run's tasks come from. `astuner run
--with-logview` starts the one named `logview` (the log viewer) itself,
so that `--keep-logview` can keep it after the run has ended.
The run starts once the companion's `GET /healthz` answers, and the process
is stopped when the run ends or fails. The process is started in a session
of its own, so its process group id is its PID: stopping sends SIGTERM (then
SIGKILL) to that group only, which also reaches the children of a launcher
script, and never touches a process by name.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from astuner.errors import AstunerError, PluginError
from astuner.logs import get_logger
from astuner.protocols import ServesPage

if TYPE_CHECKING:
    from astuner.plugins import Plugins, Registration

CompanionStarter = Callable[["Registration", "str | None"], AbstractContextManager[Any]]
"""Starts companion `registration` as `--with-NAME value` asks (the launch path's
`astuner.components.build_companion`, bound to the run and its folder)."""

COMPANION_FLAG = "--with-"
# The companion behind `astuner run --with-logview`, provided by the plugin astuner-logview.
LOG_VIEWER = "logview"
# The click settings of a command taking `--with-NAME [VALUE]`: unknown options reach `ctx.args`.
COMPANION_ARGS: dict[str, Any] = {"allow_extra_args": True, "ignore_unknown_options": True}


class Companion:
    """`with Companion(name, argv, health_url=...):` runs `argv` while the block runs.

    `busy_hint` completes the error raised when something already answers
    `health_url` (e.g. which config key points elsewhere). A companion
    factory returns one, and `astuner run --with-files site/` serves `site/`
    for as long as the run lasts:

    ```python
    import sys
    from pathlib import Path

    from astuner.api import Companion, free_port


    def serve_files(value: str | None, run_folder: Path) -> Companion:
        port = free_port()
        return Companion(
            "files",
            [sys.executable, "-m", "http.server", str(port), "--directory", value or "."],
            health_url=f"http://127.0.0.1:{port}/",
            log_path=run_folder / "files.log",
        )
    ```
    """

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
        busy_hint: str = "",
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.health_url = health_url
        self.cwd = cwd
        self.env = dict(env) if env is not None else None
        self.log_path = Path(log_path) if log_path else None
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.busy_hint = busy_hint
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self) -> Companion:
        """Start the process and wait until `health_url` answers 200; stops it again on failure."""
        if _healthy(self.health_url):
            hint = f" {self.busy_hint}" if self.busy_hint else ""
            raise AstunerError(
                f"Cannot start {self.name}: something already answers {self.health_url}. Stop it, or "
                f"drop the --with-... option to use the running service.{hint}"
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

    ```python
    import subprocess

    from astuner.api import stop_with_parent

    server = subprocess.Popen(argv, start_new_session=True, preexec_fn=stop_with_parent())
    ```
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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, for a server this run starts.

    ```python
    from astuner.api import free_port

    port = free_port()
    argv = ["my-server", "--host", "127.0.0.1", "--port", str(port)]
    ```
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    import httpx  # only when a companion starts: `astuner --help` imports this module for its flags

    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def companions_help(plugins: Plugins) -> str:
    """The help epilog of a command taking companions: one line per installed one."""
    registry = plugins.registry("companion")
    lines = [
        f"  {COMPANION_FLAG}{name}: {reg.summary or reg.plugin}" for name, reg in sorted(registry.items())
    ]
    # "\b" keeps click from rewrapping the list into one paragraph.
    return "\b\nCompanion services (--with-NAME [VALUE], started beside the run):\n" + (
        "\n".join(lines) or "  none installed"
    )


def companion_requests(args: Sequence[str], plugins: Plugins) -> dict[str, str | None]:
    """The companions asked for by the command line's leftover `args`: `--with-NAME [VALUE]` each.

    `VALUE` is the next argument when it is not an option, or follows `=`;
    a bare flag asks with None. Anything else left over is an error that
    names the installed companions.
    """
    registry = plugins.registry("companion")
    requested: dict[str, str | None] = {}
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        flag, eq, value = arg.partition("=")
        name = flag[len(COMPANION_FLAG) :] if flag.startswith(COMPANION_FLAG) else ""
        if name not in registry:
            installed = ", ".join(COMPANION_FLAG + n for n in sorted(registry)) or "none installed"
            raise AstunerError(
                f"Unknown option or argument '{arg}'. Companion services are asked for with "
                f"--with-NAME [VALUE] (installed: {installed}); see --help for the other options."
            )
        if not eq and rest and not rest[0].startswith("-"):
            value = rest.pop(0)
        requested[name] = value if eq or value else None
    return requested


@contextmanager
def companions_for_run(
    start: CompanionStarter, plugins: Plugins, requested: Mapping[str, str | None]
) -> Iterator[list[Any]]:
    """The `requested` companions (name -> value) of `plugins`, running while the block runs.

    Each is started by `start`, which calls its registered factory as
    `factory(value, **services)` (`astuner.components.build_companion`: the
    services it names, such as `run_folder`, where its logs go, or
    `settings_of`), and entered in order, so one that fails to start stops
    those already running. In the main thread SIGTERM is turned into
    SystemExit meanwhile, so a terminated run still stops its companions.
    """
    with ExitStack() as stack:
        started: list[Any] = []
        if requested:
            stack.enter_context(_sigterm_exits())
        for name, value in requested.items():
            registration = plugins.get("companion", name)
            started.append(stack.enter_context(start(registration, value)))
        yield started


def log_viewer(plugins: Plugins) -> Registration:
    """The `logview` companion that `astuner run --with-logview` starts; a clear error when it is missing."""
    registration = plugins.registry("companion").get(LOG_VIEWER)
    if registration is None:
        raise AstunerError(
            "--with-logview and --keep-logview serve the rollout log viewer, which comes with the plugin "
            "astuner-logview, and no installed plugin provides it. Install it with `pip install "
            "astuner-logview` (in a checkout of astuner: `pip install -e ./plugins/logview`), or run without "
            "these options; `astuner plugins list` shows an installed one that failed to import."
        )
    return registration


@contextmanager
def serving_page(
    registration: Registration, value: str | None, start: CompanionStarter
) -> Iterator[ServesPage]:
    """The companion `registration` started by `start` as `--with-NAME value` would, for one that serves
    a page."""
    with start(registration, value) as started:
        if not isinstance(started, ServesPage):
            raise PluginError(
                f"Companion '{registration.name}' of plugin {registration.plugin} yields a "
                f"'{type(started).__name__}', which serves no page (a page companion yields an object with "
                "`url` and `wait()`). Update that plugin."
            )
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
