"""Starting and stopping the viewer: for `astuner logview` and for `astuner run --with-logview`."""

from __future__ import annotations

import time
from pathlib import Path

from astuner.errors import AstunerError
from astuner.logview.app import create_app
from astuner.logview.runs import find_runs
from astuner.serving import ThreadedServer

DEFAULT_PORT = 8181


class LogviewServer:
    """A running viewer: `.url` to open, `.stop()` to end it, `.wait()` to serve until Ctrl-C."""

    def __init__(self, server: ThreadedServer, root: Path) -> None:
        self._server = server
        self.root = root

    @property
    def url(self) -> str:
        return f"{self._server.url}/"

    def stop(self) -> None:
        self._server.stop()

    def wait(self) -> None:
        """Block until Ctrl-C (or SIGTERM turned into KeyboardInterrupt), then stop."""
        try:
            while True:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()


def start_logview(
    path: str | Path, host: str = "127.0.0.1", port: int = DEFAULT_PORT, tokenizer: str | None = None
) -> LogviewServer:
    """Serve the viewer over `path` in a background thread; port 0 picks a free port.

    `path` is a record root, an experiment folder or one run folder.
    `tokenizer` overrides the tokenizer each run's `model.path` names.
    Raises `AstunerError` when the folder is missing or the port is taken.
    """
    root = Path(path).expanduser()
    if not root.is_dir():
        raise AstunerError(
            f"The log viewer needs a folder of experiment records, but {root} is not a folder. "
            "Pass the record root (launcher_record), an experiment folder or one run folder."
        )
    try:
        server = ThreadedServer(create_app(root, tokenizer=tokenizer), host=host, port=port)
    except OSError as exc:
        raise AstunerError(
            f"Cannot serve the log viewer on {host}:{port}: {exc.strerror or exc}. "
            "Stop whatever uses that port, or pick another with --port (0 picks a free one)."
        ) from exc
    return LogviewServer(server.start(), root.resolve())


def runs_found(path: str | Path) -> int:
    """How many runs the viewer finds under `path` (for the command's greeting)."""
    return len(find_runs(Path(path).expanduser().resolve()))
