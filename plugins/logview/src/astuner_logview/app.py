"""The viewer's HTTP side: a JSON API over a `RecordStore` and the static page.

Routes (all GET):

- `/`: the page; `/static/<file>`: its script and style, only files
  shipped in `astuner_logview/static/`.
- `/api/health`: `{"status": "ok"}` once the server answers (`start_logview` waits for it).
- `/api/runs`: the run list.
- `/api/trajectories?run=&offset=&limit=&step=&task=&min_reward=&max_reward=&success=&madness=&error=&agent=`:
  a filtered page of trajectory summaries (`success`, `madness`, `error`: `yes`/`no`; `agent`: those
  in which that agent made a call, the reward bounds then applying to its own reward where the
  judge scored agents), each with its agents and their rewards (`agent_rewards`).
- `/api/trajectory?run=&file=&line=`: one trajectory: conversation, token samples, advantage, and
  per agent its calls, adapters, reward and advantages; each call and sample names its agent and adapter.
- `/api/metrics?run=`: the rows of `metrics.jsonl`, each key's declaration (`metrics`: label,
  description, unit, good, group; undeclared keys left out), and the health checks they
  crossed, with on how many steps.
- `/api/file?run=&name=`: a text file inside the run folder (`config.yaml`, `astuner.log`), its last MiB.

Unknown runs, files and lines answer 404, and so does anything that
resolves (symlinks followed) outside the records root, whether or not it
exists. Every response forbids content sniffing and, through a content
security policy, any script or style not served from here, as a second line
of defence behind the page's own escaping.

Before any route, `AccessGuard` (see `astuner_logview.access`) refuses a
request whose Host is not a loopback name when the server is bound to
loopback (403: DNS rebinding), and one without the access token when there
is one (401).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pydantic_core
from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response

from astuner_logview.access import AccessGuard
from astuner_logview.runs import printable
from astuner_logview.store import Filters, NotFound, RecordStore

STATIC = Path(__file__).parent / "static"
_FILE_TAIL = 1 << 20
_MAX_PAGE = 500
_SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class _JSON(JSONResponse):
    """Compact UTF-8 JSON; NaN and infinities (JSON has no spelling for them) become null.

    Text that is not valid Unicode (a run named after a config file whose
    name is not UTF-8, a record holding a lone surrogate) is sent in its
    `printable` form rather than failing the whole answer.
    """

    def render(self, content: Any) -> bytes:
        try:
            return pydantic_core.to_json(content, inf_nan_mode="null")
        except pydantic_core.PydanticSerializationError:
            return pydantic_core.to_json(_printable(content), inf_nan_mode="null")


def _printable(content: Any) -> Any:
    if isinstance(content, str):
        return printable(content)
    if isinstance(content, dict):
        return {_printable(key): _printable(value) for key, value in content.items()}
    if isinstance(content, (list, tuple)):
        return [_printable(value) for value in content]
    return content


def _flag(value: str | None, name: str) -> bool | None:
    if value in (None, "", "any"):
        return None
    if value in ("yes", "true", "1"):
        return True
    if value in ("no", "false", "0"):
        return False
    raise HTTPException(400, f"{name} must be yes, no or any, not {value!r}")


def create_app(
    root: Path, tokenizer: str | None = None, host: str = "127.0.0.1", token: str | None = None
) -> FastAPI:
    """The viewer over the runs under `root` (a record root, an experiment or one run).

    `host` is the address the server is bound to: on loopback (the default)
    only loopback Host headers are answered. `token`, when set, is required
    on every request (`start_logview` sets one for any other bind).
    """
    store = RecordStore(root, tokenizer=tokenizer)
    app = FastAPI(title="astuner logview", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.store = store
    guard = AccessGuard(host, token)
    shipped = {p.name: p for p in STATIC.iterdir() if p.is_file()}

    @app.middleware("http")
    async def guard_and_headers(request: Request, call_next: Any) -> Response:
        response = await guard(request, call_next)
        response.headers.update(_SECURITY_HEADERS)
        return response

    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound) -> Response:
        return _JSON({"detail": str(exc)}, status_code=404)

    @app.get("/")
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/static/{name}")
    def static(name: str) -> FileResponse:
        if name not in shipped:
            raise NotFound(f"no static file {name!r}")
        return FileResponse(shipped[name])

    @app.get("/api/health", response_class=_JSON)
    def health() -> _JSON:
        return _JSON({"status": "ok"})

    @app.get("/api/runs", response_class=_JSON)
    def runs() -> _JSON:
        return _JSON({"root": str(store.root), "runs": store.run_list()})

    @app.get("/api/trajectories", response_class=_JSON)
    def trajectories(
        run: str,
        offset: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=_MAX_PAGE)] = 50,
        step: str | None = None,
        task: str | None = None,
        min_reward: float | None = None,
        max_reward: float | None = None,
        success: str | None = None,
        madness: str | None = None,
        error: str | None = None,
        agent: str | None = None,
    ) -> _JSON:
        filters = Filters(
            step=step or None,
            task=task or None,
            min_reward=min_reward,
            max_reward=max_reward,
            success=_flag(success, "success"),
            madness=_flag(madness, "madness"),
            error=_flag(error, "error"),
            agent=agent or None,
        )
        return _JSON(store.page(run, filters, offset, limit))

    @app.get("/api/trajectory", response_class=_JSON)
    def trajectory(run: str, file: str, line: Annotated[int, Query(ge=0)]) -> _JSON:
        return _JSON(store.trajectory(run, file, line))

    @app.get("/api/metrics", response_class=_JSON)
    def metrics(run: str) -> _JSON:
        return _JSON(store.metrics(run))

    @app.get("/api/file")
    def run_file(run: str, name: str) -> PlainTextResponse:
        path = store.run_file(run, name)
        size = path.stat().st_size
        with path.open("rb") as handle:
            handle.seek(max(0, size - _FILE_TAIL))
            data = handle.read()
        text = data.decode("utf-8", errors="replace")
        if size > _FILE_TAIL:
            text = f"[... first {size - _FILE_TAIL} bytes not shown ...]\n" + text
        return PlainTextResponse(text)

    return app
