"""Run an ASGI app (FastAPI) with uvicorn in a background thread.

Used for astuner's own local servers (the OpenAI gateway, the log viewer)
and by tests. Binds 127.0.0.1 by default; port 0 picks a free port.
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn


class ThreadedServer:
    """`with ThreadedServer(app) as server: httpx.get(server.url + "/path")`.

    `app` is an ASGI app (FastAPI); port 0 takes a free port.

    ```python
    import httpx
    from fastapi import FastAPI

    from astuner.api import ThreadedServer

    app = FastAPI()


    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}


    with ThreadedServer(app) as server:
        assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    ```
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.host, self.port = host, int(self._socket.getsockname()[1])
        config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_keep_alive=30)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name=f"uvicorn-{self.port}", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _serve(self) -> None:
        self._server.run(sockets=[self._socket])

    def start(self, timeout: float = 10.0) -> ThreadedServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"server on {self.url} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> ThreadedServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
