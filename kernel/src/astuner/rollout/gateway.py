"""The OpenAI-compatible gateway: one local server for all concurrent rollouts.

`POST /rollout/<rollout_id>/<agent>/v1/chat/completions` runs `ModelTuner.chat`
of that rollout, so an agent written with the `openai` SDK (or LangChain,
or raw HTTP) is recorded token for token without changing its code.
Streaming (SSE) and non-streaming replies, tools and `tool_choice` are
supported. The server runs as a task in the runner's own event loop, so a
request goes straight into `ModelTuner.chat` and the engine batches it with
every other rollout's calls (measured faster than a server thread handing
requests across loops). Workflows must therefore use an async client, or
run a blocking one with `await asyncio.to_thread(...)`: a blocking call
made on the loop itself would stall every rollout, gateway included.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse, Response, StreamingResponse

from astuner.core.trajectory import LLMCall
from astuner.rollout.model_tuner import ModelTuner

_SAMPLING_KEYS = {"temperature": "temperature", "top_p": "top_p", "seed": "seed"}
INVALID_TOOL = "invalid_tool_call"


def openai_tool_calls(call: LLMCall) -> list[dict[str, Any]]:
    """Parsed tool calls in OpenAI's shape; malformed ones as calls of `invalid_tool_call`.

    A malformed call reaches the agent as a call of a tool it does not have,
    so its own tool dispatch reports an error back, and the arguments say why.
    """
    calls = [tc.to_openai() for tc in call.tool_calls]
    for err in call.tool_call_errors:
        arguments = json.dumps({"error": err.error, "raw": err.raw})
        calls.append(
            {"id": err.id, "type": "function", "function": {"name": INVALID_TOOL, "arguments": arguments}}
        )
    return calls


def _finish_reason(call: LLMCall, tool_calls: list[dict[str, Any]]) -> str:
    if tool_calls:
        return "tool_calls"
    return "length" if call.finish_reason == "length" else "stop"


def completion(call: LLMCall, model: str, completion_id: str) -> dict[str, Any]:
    """A `chat.completion` object, with vLLM-style `prompt_token_ids` / `token_ids` added."""
    tool_calls = openai_tool_calls(call)
    message: dict[str, Any] = {"role": "assistant", "content": call.content or (None if tool_calls else "")}
    if tool_calls:
        message["tool_calls"] = tool_calls
    if call.reasoning:
        message["reasoning_content"] = call.reasoning
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": _finish_reason(call, tool_calls),
                "token_ids": call.response_ids,
            }
        ],
        "prompt_token_ids": call.prompt_ids,
        "usage": _usage(call),
    }


def _usage(call: LLMCall) -> dict[str, int]:
    prompt, generated = len(call.prompt_ids), len(call.response_ids)
    return {"prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated}


def completion_chunks(call: LLMCall, model: str, completion_id: str, include_usage: bool) -> Iterator[str]:
    """The same reply as server-sent `chat.completion.chunk` events."""
    created = int(time.time())

    def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        chunk = {
            **_chunk_head(completion_id, created, model),
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return f"data: {json.dumps(chunk)}\n\n"

    tool_calls = openai_tool_calls(call)
    yield event({"role": "assistant", "content": ""})
    if call.content:
        yield event({"content": call.content})
    for i, tc in enumerate(tool_calls):
        yield event({"tool_calls": [{"index": i, **tc}]})
    yield event({}, _finish_reason(call, tool_calls))
    if include_usage:
        usage = {**_chunk_head(completion_id, created, model), "choices": [], "usage": _usage(call)}
        yield f"data: {json.dumps(usage)}\n\n"
    yield "data: [DONE]\n\n"


def _chunk_head(completion_id: str, created: int, model: str) -> dict[str, Any]:
    return {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model}


class Gateway:
    """Routes OpenAI requests to the registered rollouts' model handles.

    `async with Gateway() as gateway:` serves on 127.0.0.1 (a free port by
    default) from the current event loop until the block ends.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._tuners: dict[str, ModelTuner] = {}
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.host, self.port = host, int(self._socket.getsockname()[1])
        config = uvicorn.Config(self._app(), log_level="warning", lifespan="off", timeout_keep_alive=60)
        self._server = uvicorn.Server(config)
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def register(self, tuner: ModelTuner) -> None:
        self._tuners[tuner.rollout_id] = tuner

    def unregister(self, rollout_id: str) -> None:
        self._tuners.pop(rollout_id, None)

    async def __aenter__(self) -> Gateway:
        self._task = asyncio.create_task(self._server.serve(sockets=[self._socket]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.005)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await self._task
        self._socket.close()

    def _app(self) -> FastAPI:
        app = FastAPI(title="astuner gateway")

        @app.get("/health")
        async def health() -> dict[str, Any]:
            return {"status": "ok", "rollouts": len(self._tuners)}

        @app.get("/rollout/{rollout_id}/{agent}/v1/models")
        async def models(rollout_id: str, agent: str) -> dict[str, Any]:
            return {"object": "list", "data": [{"id": "astuner", "object": "model", "owned_by": "astuner"}]}

        @app.post("/rollout/{rollout_id}/{agent}/v1/chat/completions", response_model=None)
        async def chat_completions(rollout_id: str, agent: str, body: dict[str, Any]) -> Any:
            tuner = self._tuners.get(rollout_id)
            if tuner is None:
                raise HTTPException(404, f"no live rollout '{rollout_id}' (finished, or never started)")
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise HTTPException(400, "'messages' must be a non-empty list")
            tools = body.get("tools") if body.get("tool_choice") != "none" else None
            sampling = {
                ours: body[theirs] for theirs, ours in _SAMPLING_KEYS.items() if body.get(theirs) is not None
            }
            max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
            if max_tokens:
                sampling["max_tokens"] = min(int(max_tokens), tuner.sampling.max_tokens)
            try:
                call = await tuner.chat(messages, tools, agent_name=agent, **sampling)
            except Exception as exc:
                return JSONResponse({"error": {"message": f"{type(exc).__name__}: {exc}"}}, status_code=500)
            model = str(body.get("model") or "astuner")
            completion_id = f"chatcmpl-{rollout_id}-{call.index}"
            if body.get("stream"):
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return StreamingResponse(
                    completion_chunks(call, model, completion_id, include_usage),
                    media_type="text/event-stream",
                )
            # Serialised here: FastAPI's generic encoder is slow on long token-id lists.
            return Response(json.dumps(completion(call, model, completion_id)), media_type="application/json")

        return app
