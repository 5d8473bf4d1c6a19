"""Starting and stopping the viewer: for `astuner logview` and for `astuner run --with-logview`."""

from __future__ import annotations

import secrets
import time
import urllib.request
from pathlib import Path
from urllib.error import URLError
from urllib.parse import quote

from astuner.api import AstunerError, ThreadedServer
from astuner_logview.access import is_loopback
from astuner_logview.app import create_app
from astuner_logview.runs import find_runs

DEFAULT_PORT = 8181
ANSWER_TIMEOUT_S = 30.0


class LogviewServer:
    """A running viewer: `.url` to open, `.stop()` to end it, `.wait()` to serve until Ctrl-C.

    `.token` is the access token every request needs (None: none needed);
    `.url` then carries it as `?token=`, so that opening it logs the browser in.
    """

    def __init__(self, server: ThreadedServer, root: Path, token: str | None = None) -> None:
        self._server = server
        self.root = root
        self.token = token

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def url(self) -> str:
        return f"{self._server.url}/" + (f"?token={quote(self.token, safe='')}" if self.token else "")

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
    path: str | Path,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    tokenizer: str | None = None,
    token: str | None = None,
) -> LogviewServer:
    """Serve the viewer over `path` in a background thread; port 0 picks a free port.

    `path` is a record root, an experiment folder or one run folder.
    `tokenizer` overrides the tokenizer each run's `model.path` names.
    `token` is an access token every request must bring (`?token=` once,
    then a cookie, or `Authorization: Bearer`). Bound to loopback (the
    default) the viewer needs none and answers only loopback Host names;
    bound to any other address it always needs one, and without `token` a
    random one is made (`.token`, and in `.url`): logs must never be open to
    the network by accident.
    Returns once the server has answered a request (`/api/health`), so an
    address printed next works at once.
    Raises `AstunerError` when the folder is missing, the port is taken or
    the server does not answer.
    """
    root = Path(path).expanduser()
    if not root.is_dir():
        raise AstunerError(
            f"The log viewer needs a folder of experiment records, but {root} is not a folder. "
            "Pass the record root (launcher_record), an experiment folder or one run folder."
        )
    token = token or None
    if token is None and not is_loopback(host):
        token = secrets.token_urlsafe(32)
    try:
        app = create_app(root, tokenizer=tokenizer, host=host, token=token)
        server = ThreadedServer(app, host=host, port=port)
    except OSError as exc:
        raise AstunerError(
            f"Cannot serve the log viewer on {host}:{port}: {exc.strerror or exc}. "
            "Stop whatever uses that port, or pick another with --port (0 picks a free one)."
        ) from exc
    viewer = LogviewServer(server.start(), root.resolve(), token)
    try:
        _wait_until_answering(viewer, host)
    except AstunerError:
        viewer.stop()
        raise
    return viewer


def _wait_until_answering(viewer: LogviewServer, host: str, timeout: float = ANSWER_TIMEOUT_S) -> None:
    """Return once `/api/health` answers 200, so the address printed next works at its first request.

    A started server thread is not yet proof that a request gets through the
    app (its guard, its routes); users open the printed address at once.
    A wildcard bind is asked through loopback, with the token when there is one.
    """
    address = "127.0.0.1" if host in ("0.0.0.0", "") else host
    request = urllib.request.Request(f"http://{address}:{viewer.port}/api/health")
    if viewer.token:
        request.add_header("Authorization", f"Bearer {viewer.token}")
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through http_proxy
    deadline = time.monotonic() + timeout
    while True:
        try:
            with direct.open(request, timeout=5) as answer:
                if answer.status == 200:
                    return
                problem = f"status {answer.status}"
        except (URLError, OSError) as exc:
            problem = str(exc)
        if time.monotonic() > deadline:
            raise AstunerError(
                f"The log viewer on {host}:{viewer.port} did not answer within {timeout:.0f} s ({problem})."
            )
        time.sleep(0.05)


def runs_found(path: str | Path) -> int:
    """How many runs the viewer finds under `path` (for the command's greeting)."""
    return len(find_runs(Path(path).expanduser().resolve()))
