"""The reference EnvService as a FastAPI app.

Instances live in memory. One that sees no request for `idle_timeout`
seconds is released by a sweeper; at `max_instances` live instances
`/create` answers 503. Requests the server cannot serve (unknown env type,
task, split or instance, a malformed action, a body that is not the
protocol's JSON) get 400 with the reason in `detail`. `GET /instances`
(an extension of the protocol) counts live, created, released, expired
and at most simultaneously live instances, so clients and tests can check
that nothing leaks.

`step_delay` makes every `/step` take that many seconds more, like an
environment that runs a tool or a web call per action (the latency that
asynchronous rollouts hide, bench/bench_async.py). The handler awaits it,
so other instances' requests are served meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse

from astuner_judge_envservice.protocol import ServiceRequest, action_text
from astuner_judge_envservice.server.base import BadRequest, Episode, Game


class ServerFull(RuntimeError):
    """The live-instance cap is reached; answered with HTTP 503."""


@dataclass
class Instance:
    env_type: str
    task_id: str
    episode: Episode
    last_used: float = field(default_factory=time.monotonic)
    terminated: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Instances:
    """The live instances and their counters."""

    def __init__(self, max_instances: int, idle_timeout: float) -> None:
        self.max_instances = max_instances
        self.idle_timeout = idle_timeout
        self.live: dict[str, Instance] = {}
        self.created = self.released = self.expired = self.peak_live = 0

    def add(self, instance_id: str | None, instance: Instance) -> str:
        if len(self.live) >= self.max_instances:
            raise ServerFull(
                f"the server holds {len(self.live)} live instances, its cap (--max-instances "
                f"{self.max_instances}); release instances or start the server with a higher cap"
            )
        instance_id = instance_id or f"exp_{int(time.time())}_{secrets.token_hex(4)}"
        if instance_id in self.live:
            raise BadRequest(f"instance '{instance_id}' already exists; release it or pick another id")
        self.live[instance_id] = instance
        self.created += 1
        self.peak_live = max(self.peak_live, len(self.live))
        return instance_id

    def get(self, instance_id: str | None) -> Instance:
        if not instance_id:
            raise BadRequest("this call needs 'instance_id' (from the answer to /create)")
        instance = self.live.get(instance_id)
        if instance is None:
            raise BadRequest(
                f"unknown instance '{instance_id}': it was never created here, was released, or "
                f"expired after {self.idle_timeout:g} s without requests"
            )
        instance.last_used = time.monotonic()
        return instance

    def release(self, instance_id: str | None) -> None:
        self.get(instance_id)
        del self.live[instance_id]  # type: ignore[arg-type]
        self.released += 1

    def sweep(self) -> int:
        """Release the instances idle for longer than `idle_timeout`; returns how many."""
        cutoff = time.monotonic() - self.idle_timeout
        stale = [i for i, inst in self.live.items() if inst.last_used < cutoff and not inst.lock.locked()]
        for instance_id in stale:
            del self.live[instance_id]
        self.expired += len(stale)
        return len(stale)

    def counts(self) -> dict[str, int]:
        return {
            "live": len(self.live),
            "created": self.created,
            "released": self.released,
            "expired": self.expired,
            "peak_live": self.peak_live,
            "max_instances": self.max_instances,
        }


def create_app(
    games: Mapping[str, Game],
    *,
    max_instances: int = 1024,
    idle_timeout: float = 3600.0,
    sweep_interval: float | None = None,
    step_delay: float = 0.0,
) -> FastAPI:
    """An EnvService app serving `games` (env_type -> game); each `/step` waits `step_delay` s first."""
    if step_delay < 0:
        raise ValueError(f"step_delay must be at least 0 seconds, got {step_delay}")
    instances = Instances(max_instances, idle_timeout)
    interval = sweep_interval if sweep_interval is not None else min(60.0, max(idle_timeout / 4, 0.05))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async def sweeper() -> None:
            while True:
                await asyncio.sleep(interval)
                instances.sweep()

        task = asyncio.create_task(sweeper())
        try:
            yield
        finally:
            task.cancel()

    app = FastAPI(title="astuner reference EnvService", lifespan=lifespan)
    app.state.instances = instances

    @app.exception_handler(BadRequest)
    async def bad_request(request: Request, exc: BadRequest) -> JSONResponse:
        return JSONResponse({"success": False, "detail": str(exc)}, status_code=400)

    @app.exception_handler(ServerFull)
    async def full(request: Request, exc: ServerFull) -> JSONResponse:
        return JSONResponse({"success": False, "detail": str(exc)}, status_code=503)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"success": False, "detail": _explain(exc)}, status_code=400)

    @app.exception_handler(Exception)
    async def fault(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"success": False, "detail": f"{type(exc).__name__}: {exc}"}, status_code=500)

    def game_of(req: ServiceRequest) -> Game:
        game = games.get(req.env_type)
        if game is None:
            raise BadRequest(
                f"env_type '{req.env_type}' is not served here; this server has: {', '.join(games)}"
            )
        return game

    def ok(data: Any) -> dict[str, Any]:
        return {"success": True, "data": data}

    @app.get("/healthz", response_class=PlainTextResponse)
    async def healthz() -> str:
        return "OK"

    @app.get("/instances")
    async def counts() -> dict[str, int]:
        return instances.counts()

    @app.post("/get_env_profile")
    async def get_env_profile(req: ServiceRequest) -> dict[str, Any]:
        return ok(game_of(req).task_ids(str(req.params.get("split", "train"))))

    @app.post("/create")
    async def create(req: ServiceRequest) -> dict[str, Any]:
        game = game_of(req)
        if not req.task_id:
            raise BadRequest("/create needs 'task_id' (one of the ids from /get_env_profile)")
        episode = game.episode(req.task_id, req.params)
        instance_id = instances.add(req.instance_id, Instance(req.env_type, req.task_id, episode))
        state = episode.initial_state()
        return ok({"state": state, "info": {"instance_id": instance_id, "task_id": req.task_id}})

    @app.post("/step")
    async def step(req: ServiceRequest) -> dict[str, Any]:
        instance = instances.get(req.instance_id)
        text = _action(req.messages)
        async with instance.lock:
            if instance.terminated:
                raise BadRequest(
                    f"the episode of instance '{req.instance_id}' is over; evaluate or release it"
                )
            if step_delay:
                await asyncio.sleep(step_delay)
            result = await _maybe_await(instance.episode.step, text)
            instance.terminated = result.terminated
        return ok(
            {
                "state": [{"role": "user", "content": result.observation}],
                "reward": result.reward,
                "is_terminated": result.terminated,
                "info": result.info,
            }
        )

    @app.post("/evaluate")
    async def evaluate(req: ServiceRequest) -> dict[str, Any]:
        instance = instances.get(req.instance_id)
        return ok(instance.episode.score(bool(req.params.get("sparse", False))))

    @app.post("/get_info")
    async def get_info(req: ServiceRequest) -> dict[str, Any]:
        instance = instances.get(req.instance_id)
        return ok({**instance.episode.info(), "task_id": instance.task_id, "terminated": instance.terminated})

    @app.post("/release")
    async def release(req: ServiceRequest) -> dict[str, Any]:
        instances.release(req.instance_id)
        return ok(None)

    return app


def _action(messages: Any) -> str:
    """The action's text; a `/step` needs `messages` = {"role": "assistant", "content": ...}."""
    if not isinstance(messages, dict) or "content" not in messages:
        raise BadRequest(
            '/step needs the action in \'messages\' as {"role": "assistant", "content": "..."}, '
            f"got {str(messages)[:120]!r}"
        )
    if messages.get("role", "assistant") != "assistant":
        raise BadRequest(f"the action's role must be 'assistant', not {messages.get('role')!r}")
    try:
        return action_text(messages)
    except TypeError as exc:
        raise BadRequest(f"the action's content must be text or a list of text blocks: {exc}") from exc


async def _maybe_await(fn: Callable[..., Any], *args: Any) -> Any:
    """Games step synchronously; a test game may step asynchronously (e.g. to hang)."""
    result = fn(*args)
    return await result if inspect.isawaitable(result) else result


def _explain(exc: RequestValidationError) -> str:
    problems = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
        if error.get("type") == "json_invalid":
            problems.append(
                f"the body is not valid JSON ({error.get('ctx', {}).get('error', 'parse error')})"
            )
        else:
            problems.append(f"{where}: {error.get('msg')}")
    return (
        "bad request body: " + "; ".join(problems) + '. Send JSON {"env_type": str, "task_id": str|null, '
        '"instance_id": str|null, "messages": object, "params": object}.'
    )
