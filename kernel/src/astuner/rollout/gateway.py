"""The OpenAI-compatible gateway: one local server for all concurrent rollouts.

`POST /rollout/<rollout_id>/<agent>/v1/chat/completions` runs `ModelTuner.chat`
of that rollout, so an agent written with the `openai` SDK (or LangChain,
or raw HTTP) is recorded token for token without changing its code.
Streaming (SSE) and non-streaming replies, tools and `tool_choice` are
supported. Requests are checked as OpenAI's API checks them
(`ChatCompletionRequest`): a bad one is a 400 with OpenAI's error body
naming the field, and never reaches the model; only `n=1` is served, and
`stop` is checked but not applied (replies end at the end of turn).

The server runs as a task in the runner's own event loop, so a request
goes straight into `ModelTuner.chat` and the engine batches it with every
other rollout's calls (measured faster than a server thread handing
requests across loops). Workflows must therefore use an async client, or
run a blocking one with `await asyncio.to_thread(...)`: a blocking call
made on the loop itself would stall every rollout, gateway included.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Iterator
from typing import Annotated, Any, Literal, Union

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

from astuner.core.trajectory import LLMCall
from astuner.logs import get_logger
from astuner.rollout.model_tuner import ModelTuner

_SAMPLING_KEYS = ("temperature", "top_p", "seed")


def openai_tool_calls(call: LLMCall) -> list[dict[str, Any]]:
    """The call's tool calls in OpenAI's shape.

    A reply whose tool call did not parse has none: it is plain assistant
    text (`call.content`), so every agent framework keeps running on it.
    """
    return [tc.to_openai() for tc in call.tool_calls]


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


# ------------------------------------------------------------------ requests
#
# A request is checked against `ChatCompletionRequest` before it reaches the
# model, so a bad one is a 400 naming its field, as OpenAI's API answers:
# `{"error": {"message", "type": "invalid_request_error", "param", "code"}}`.
# The model only checks; the tuner gets the request's own messages and tools.
# Fields it does not name (`top_k`, `frequency_penalty`, `user`, ...) are
# accepted and ignored, as OpenAI-compatible servers do with what they lack.


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _by_json_type(expected: str, **branches: Any) -> Any:
    """A union whose branch is picked by the input's JSON type (`str`, `list`, `dict`, `null`).

    An input of another type is one error, "expected <expected>", and an
    input of a branch's type is checked by that branch alone, so its error
    names the exact place (`content[0].text`), never every branch's complaint.
    The tags (`<str>`, ...) appear in error locations; `_param` drops them.
    """
    kinds = {"str": str, "list": list, "dict": dict, "null": type(None)}

    def pick(value: Any) -> str | None:
        for name in branches:
            if isinstance(value, kinds[name]):
                return f"<{name}>"
        return None

    members = tuple(Annotated[kind, Tag(f"<{name}>")] for name, kind in branches.items())
    return Annotated[
        Union[members],  # noqa: UP007 - a tuple of members needs the subscript form
        Discriminator(pick, custom_error_type="invalid_type", custom_error_message=f"expected {expected}"),
    ]


class _Strict(BaseModel):
    # JSON types are not coerced ("10" is no integer, 1 no boolean); unknown keys pass.
    model_config = ConfigDict(strict=True, extra="allow")


class _ContentPart(_Strict):
    type: str
    text: str | None = Field(default=None, validate_default=True)

    @field_validator("text")
    @classmethod
    def _text_part_has_text(cls, text: str | None, info: ValidationInfo) -> str | None:
        if text is None and info.data.get("type") == "text":
            raise PydanticCustomError("text_required", "a text content part needs its text")
        return text


class _Function(_Strict):
    name: Annotated[str, Field(min_length=1)]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class _Tool(_Strict):
    type: Literal["function"]
    function: _Function


_Arguments = _by_json_type("a JSON string or object", str=str, dict=dict[str, Any])


class _CalledFunction(_Strict):
    name: str
    arguments: _Arguments = "{}"


class _ToolCall(_Strict):
    id: str | None = None
    type: Literal["function"] = "function"
    function: _CalledFunction


_Content = _by_json_type(
    "a string, a list of content parts or null", str=str, list=list[_ContentPart], null=None
)


class _Message(_Strict):
    # Role and tool calls come first: the content check reads them.
    role: Literal["system", "developer", "user", "assistant", "tool"]
    tool_calls: list[_ToolCall] | None = None
    content: _Content = Field(default=None, validate_default=True)
    name: str | None = None
    tool_call_id: str | None = None

    @field_validator("content")
    @classmethod
    def _null_only_beside_tool_calls(cls, content: Any, info: ValidationInfo) -> Any:
        role = info.data.get("role")
        if content is None and role is not None and not (role == "assistant" and info.data.get("tool_calls")):
            raise PydanticCustomError(
                "content_required",
                "a message with role '{role}' needs content (a string or a list of content parts); "
                "only an assistant message with tool_calls may have none",
                {"role": role},
            )
        return content


class _StreamOptions(_Strict):
    include_usage: bool | None = None


_MaxTokens = Annotated[int, Field(ge=1)]
_ToolChoice = _by_json_type(
    "'none', 'auto', 'required' or a named tool",
    str=Literal["none", "auto", "required"],
    dict=dict[str, Any],
)
_Stop = _by_json_type("a string or a list of strings", str=str, list=list[str])


class ChatCompletionRequest(_Strict):
    """The fields of a `chat.completions` request the gateway reads, with OpenAI's limits."""

    messages: Annotated[list[_Message], Field(min_length=1)]
    model: str | None = None
    tools: list[_Tool] | None = None
    tool_choice: _ToolChoice | None = None
    temperature: Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = None
    max_tokens: _MaxTokens | None = None
    max_completion_tokens: _MaxTokens | None = None
    n: int | None = None
    seed: Annotated[int, Field(ge=-(2**63), lt=2**63)] | None = None
    stop: _Stop | None = None
    stream: bool | None = None
    stream_options: _StreamOptions | None = None

    @field_validator("n")
    @classmethod
    def _one_choice(cls, n: int | None) -> int | None:
        if n is not None and n < 1:
            raise PydanticCustomError("greater_than_equal", "n must be at least 1")
        if n is not None and n > 1:
            raise PydanticCustomError(
                "unsupported_value", "only n=1 is supported: the gateway samples one choice per request"
            )
        return n


class _BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message, self.param = message, param


def _param(loc: tuple[int | str, ...]) -> str | None:
    """An error location as OpenAI names a field: `messages[0].content`."""
    param = ""
    for part in loc:
        if isinstance(part, int):
            param += f"[{part}]"
        elif not part.startswith("<"):  # a `_by_json_type` branch tag
            param += f".{part}" if param else part
    return param or None


_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "bool_type": "a boolean",
    "list_type": "an array",
    "dict_type": "an object",
    "model_type": "an object",
}


def _bad_request(exc: ValidationError) -> _BadRequest:
    """The first validation error, worded as OpenAI words it, with what was sent."""
    error = exc.errors(include_url=False)[0]
    param, kind, got = _param(error["loc"]), error["type"], error.get("input")
    if kind == "missing":
        return _BadRequest(f"Missing required parameter: '{param}'.", param)
    if kind in _EXPECTED or kind == "invalid_type":
        expected = f"expected {_EXPECTED[kind]}" if kind in _EXPECTED else error["msg"]
        return _BadRequest(
            f"Invalid type for '{param}': {expected}, but got {_json_type(got)} instead.", param
        )
    if kind == "too_short":
        unit = "item" if isinstance(got, list) else "character"
        detail = f"expected at least {error['ctx']['min_length']} {unit}(s)"
    else:
        detail = error["msg"][:1].lower() + error["msg"][1:]
    if got is not None:
        shown = json.dumps(got)
        detail += f" (got {shown if len(shown) <= 80 else shown[:77] + '...'})"
    return _BadRequest(f"Invalid value for '{param}': {detail}.", param)


def parse_request(raw: bytes) -> tuple[dict[str, Any], ChatCompletionRequest]:
    """The request body as sent and as checked; `_BadRequest` if it is not a valid request."""
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise _BadRequest(f"The request body is not valid JSON: {exc}.") from None
    if not isinstance(body, dict):
        raise _BadRequest(f"The request body must be a JSON object, not {_json_type(body)}.")
    try:
        return body, ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        raise _bad_request(exc) from None


def _error(
    status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"
) -> Response:
    error = {"message": message, "type": kind, "param": param, "code": None}
    return JSONResponse({"error": error}, status_code=status)


def _as_system(message: dict[str, Any]) -> dict[str, Any]:
    # OpenAI treats a developer message as the system message of models
    # without that role; chat templates know no developer role (Qwen's drop it).
    return {**message, "role": "system"} if message.get("role") == "developer" else message


# -------------------------------------------------------------------- server


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its SIGINT/SIGTERM capture: the gateway is a part of a run, not the process.

    uvicorn would turn the signals into a flag that a blocked event loop never
    reads, and shut the gateway down under running rollouts; the run handles
    them instead (`astuner.rollout.watchdog`).
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


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
        self._server = _EmbeddedServer(config)
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
        async def chat_completions(rollout_id: str, agent: str, request: Request) -> Response:
            tuner = self._tuners.get(rollout_id)
            if tuner is None:
                return _error(404, f"no live rollout '{rollout_id}' (finished, or never started)")
            try:
                body, checked = parse_request(await request.body())
                return await self._complete(tuner, agent, body, checked)
            except _BadRequest as exc:
                return _error(400, exc.message, exc.param)
            except Exception as exc:
                get_logger().exception("gateway request failed", rollout_id=rollout_id, agent=agent)
                return _error(500, f"{type(exc).__name__}: {exc}", kind="server_error")

        return app

    async def _complete(
        self, tuner: ModelTuner, agent: str, body: dict[str, Any], checked: ChatCompletionRequest
    ) -> Response:
        messages = [_as_system(m) for m in body["messages"]]
        tools = body.get("tools") if checked.tool_choice != "none" else None
        sampling: dict[str, Any] = {
            key: getattr(checked, key) for key in _SAMPLING_KEYS if getattr(checked, key) is not None
        }
        max_tokens = checked.max_completion_tokens or checked.max_tokens
        if max_tokens is not None:
            sampling["max_tokens"] = min(max_tokens, tuner.sampling.max_tokens)
        call = await tuner.chat(messages, tools, agent_name=agent, **sampling)
        model = checked.model or "astuner"
        completion_id = f"chatcmpl-{tuner.rollout_id}-{call.index}"
        if checked.stream:
            include_usage = bool(checked.stream_options and checked.stream_options.include_usage)
            # Built before the reply starts, so a failure is still a 500 and not a cut stream.
            chunks = list(completion_chunks(call, model, completion_id, include_usage))
            return StreamingResponse(iter(chunks), media_type="text/event-stream")
        # Serialised here: FastAPI's generic encoder is slow on long token-id lists.
        return Response(json.dumps(completion(call, model, completion_id)), media_type="application/json")
