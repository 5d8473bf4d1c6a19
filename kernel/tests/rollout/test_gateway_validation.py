"""The gateway checks each request the way OpenAI's API does: a bad one is a 400 naming the field.

Every test talks HTTP to a real gateway on 127.0.0.1 whose rollout is
backed by a scripted engine, and checks that a rejected request never
reached the model (no engine call, no recorded call).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from structlog.testing import capture_logs

from astuner.core.tokenizer import ChatTokenizer
from astuner.core.tracker import ContextTracker, TrackerSettings
from astuner.logs import get_logger
from astuner.rollout import gateway as gateway_module
from astuner.rollout.engine import SamplingParams
from astuner.rollout.gateway import Gateway
from astuner.rollout.model_tuner import ModelTuner
from astuner.testing.engines import ScriptedEngine

ROLLOUT = "r-validate"
BASE: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "What is 2 + 3?"}]}
TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}
USER = {"role": "user", "content": "hi"}

# (case id, fields merged over BASE, the `param` the 400 must name)
BAD_REQUESTS: list[tuple[str, dict[str, Any], str | None]] = [
    ("max_tokens-string", {"max_tokens": "abc"}, "max_tokens"),
    ("max_tokens-negative", {"max_tokens": -1}, "max_tokens"),
    ("max_tokens-zero", {"max_tokens": 0}, "max_tokens"),
    ("max_tokens-fraction", {"max_tokens": 1.5}, "max_tokens"),
    ("max_tokens-bool", {"max_tokens": True}, "max_tokens"),
    ("max_completion_tokens-negative", {"max_completion_tokens": -1}, "max_completion_tokens"),
    ("max_completion_tokens-string", {"max_completion_tokens": "10"}, "max_completion_tokens"),
    ("temperature-string", {"temperature": "hot"}, "temperature"),
    ("temperature-negative", {"temperature": -5}, "temperature"),
    ("temperature-above-2", {"temperature": 2.5}, "temperature"),
    ("top_p-above-1", {"top_p": 7}, "top_p"),
    ("top_p-zero", {"top_p": 0}, "top_p"),
    ("top_p-string", {"top_p": "all"}, "top_p"),
    ("n-1000", {"n": 1000}, "n"),
    ("n-zero", {"n": 0}, "n"),
    ("n-string", {"n": "1"}, "n"),
    ("seed-string", {"seed": "abc"}, "seed"),
    ("seed-fraction", {"seed": 1.5}, "seed"),
    ("stop-number", {"stop": 5}, "stop"),
    ("stop-list-of-numbers", {"stop": ["a", 1]}, "stop[1]"),
    ("stream-string", {"stream": "yes"}, "stream"),
    ("stream_options-string", {"stream": True, "stream_options": "usage"}, "stream_options"),
    ("tool_choice-number", {"tool_choice": 5}, "tool_choice"),
    ("tool_choice-unknown", {"tool_choice": "sometimes"}, "tool_choice"),
    ("model-number", {"model": 5}, "model"),
    ("messages-missing", {"messages": None}, "messages"),
    ("messages-empty", {"messages": []}, "messages"),
    ("messages-string", {"messages": "hi"}, "messages"),
    ("messages-numbers", {"messages": [1, 2]}, "messages[0]"),
    ("role-hacker", {"messages": [{"role": "hacker", "content": "hi"}]}, "messages[0].role"),
    ("role-function", {"messages": [USER, {"role": "function", "content": "x"}]}, "messages[1].role"),
    ("role-missing", {"messages": [{"content": "hi"}]}, "messages[0].role"),
    ("content-number", {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ("content-null-user", {"messages": [{"role": "user", "content": None}]}, "messages[0].content"),
    ("content-missing-user", {"messages": [{"role": "user"}]}, "messages[0].content"),
    (
        "content-null-assistant-no-tool-calls",
        {"messages": [USER, {"role": "assistant", "content": None}, USER]},
        "messages[1].content",
    ),
    ("content-part-string", {"messages": [{"role": "user", "content": ["hi"]}]}, "messages[0].content[0]"),
    (
        "content-part-text-number",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
        "messages[0].content[0].text",
    ),
    (
        "content-part-no-type",
        {"messages": [{"role": "user", "content": [{"text": "hi"}]}]},
        "messages[0].content[0].type",
    ),
    (
        "tool_calls-string",
        {"messages": [USER, {"role": "assistant", "content": None, "tool_calls": "x"}, USER]},
        "messages[1].tool_calls",
    ),
    (
        "tool_call-no-function",
        {"messages": [USER, {"role": "assistant", "content": "", "tool_calls": [{"id": "c"}]}, USER]},
        "messages[1].tool_calls[0].function",
    ),
    (
        "tool_call_id-number",
        {"messages": [USER, {"role": "tool", "content": "5", "tool_call_id": 7}]},
        "messages[1].tool_call_id",
    ),
    ("tools-string", {"tools": "x"}, "tools"),
    ("tools-list-of-strings", {"tools": ["add"]}, "tools[0]"),
    ("tool-no-function", {"tools": [{"type": "function"}]}, "tools[0].function"),
    ("tool-no-name", {"tools": [{"type": "function", "function": {}}]}, "tools[0].function.name"),
    (
        "tool-empty-name",
        {"tools": [{"type": "function", "function": {"name": ""}}]},
        "tools[0].function.name",
    ),
    ("tool-wrong-type", {"tools": [{"type": "retrieval", "function": {"name": "a"}}]}, "tools[0].type"),
    (
        "tool-parameters-string",
        {"tools": [{"type": "function", "function": {"name": "a", "parameters": "x"}}]},
        "tools[0].function.parameters",
    ),
    ("tool_choice-required-without-tools", {"tool_choice": "required"}, "tool_choice"),
    ("tool_choice-required-empty-tools", {"tool_choice": "required", "tools": []}, "tool_choice"),
    (
        "tool_choice-named-without-tools",
        {"tool_choice": {"type": "function", "function": {"name": "add"}}},
        "tool_choice",
    ),
    (
        "tool-message-without-tool_call_id",
        {"messages": [USER, {"role": "tool", "content": "5"}]},
        "messages[1].tool_call_id",
    ),
]

DEEP = 50_000
# (case id, raw request body, the `param` the 400 must name): bodies no JSON library writes from Python
# objects, sent as bytes: lone surrogates, and nesting deeper than any parser's recursion
RAW_BAD_REQUESTS: list[tuple[str, bytes, str]] = [
    (
        "lone-surrogate-escaped",
        b'{"model": "m", "messages": [{"role": "user", "content": "a\\ud800b"}]}',
        "messages[0].content",
    ),
    (
        "lone-surrogate-utf8-bytes",
        b'{"model": "m", "messages": [{"role": "user", "content": "a\xed\xa0\x80b"}]}',
        "messages[0].content",
    ),
    (
        "lone-surrogate-in-a-content-part",
        b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\udfff"}]}]}',
        "messages[0].content[0].text",
    ),
    (
        "lone-surrogate-in-a-tool-description",
        b'{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", '
        b'"function": {"name": "add", "description": "\\ud83d"}}]}',
        "tools[0].function.description",
    ),
    (
        "deep-array-in-an-unknown-field",
        b'{"messages": [{"role": "user", "content": "hi"}], "metadata": ' + b"[" * DEEP + b"]" * DEEP + b"}",
        "metadata",
    ),
    (
        "deep-array-as-content",
        b'{"messages": [{"role": "user", "content": ' + b"[" * DEEP + b"]" * DEEP + b"}]}",
        "messages[0].content",
    ),
    (
        "deep-objects-in-tool-parameters",
        b'{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": '
        b'{"name": "add", "parameters": ' + b'{"a": ' * 500 + b"1" + b"}" * 500 + b"}}]}",
        "tools[0].function.parameters",
    ),
]


@pytest.fixture
def logs() -> Iterator[list[dict[str, Any]]]:
    """The structlog events emitted meanwhile (the astuner logger configured first, or it resets capture)."""
    get_logger()
    with capture_logs() as events:
        yield events


def _tuner(
    tokenizer: ChatTokenizer, respond: Callable[[str], str], settings: TrackerSettings | None
) -> tuple[ModelTuner, ScriptedEngine]:
    engine = ScriptedEngine(tokenizer, respond)
    tuner = ModelTuner(
        rollout_id=ROLLOUT,
        engine=engine,
        sampling=SamplingParams(max_tokens=64),
        tracker=ContextTracker(tokenizer, settings),
    )
    return tuner, engine


def serve(
    tokenizer: ChatTokenizer,
    talk: Callable[[httpx.AsyncClient, ModelTuner], Awaitable[Any]],
    respond: Callable[[str], str] = lambda prompt: "The answer is 5.",
    settings: TrackerSettings | None = None,
) -> tuple[Any, ModelTuner, ScriptedEngine]:
    """Run `talk(http, tuner)` against a live gateway with one rollout, its tracker's `settings`."""
    tuner, engine = _tuner(tokenizer, respond, settings)

    async def main() -> Any:
        async with Gateway() as gateway:
            tuner.gateway_url = gateway.url
            gateway.register(tuner)
            async with httpx.AsyncClient(base_url=tuner.openai_base_url) as http:
                try:
                    return await talk(http, tuner)
                finally:
                    await tuner.aclose()

    return asyncio.run(main()), tuner, engine


def post(body: dict[str, Any]) -> Callable[[httpx.AsyncClient, ModelTuner], Awaitable[httpx.Response]]:
    async def talk(http: httpx.AsyncClient, tuner: ModelTuner) -> httpx.Response:
        return await http.post("/chat/completions", json=body)

    return talk


def assert_openai_error(reply: httpx.Response, status: int, param: str | None, kind: str) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"].startswith("application/json")
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert (error["type"], error["param"], error["code"]) == (kind, param, None), error
    assert isinstance(error["message"], str) and error["message"], error
    return error


@pytest.mark.parametrize(("fields", "param"), [c[1:] for c in BAD_REQUESTS], ids=[c[0] for c in BAD_REQUESTS])
def test_bad_request_is_400_naming_the_field(
    qwen25: ChatTokenizer, fields: dict[str, Any], param: str
) -> None:
    body = {k: v for k, v in {**BASE, **fields}.items() if v is not None}
    reply, tuner, engine = serve(qwen25, post(body))
    error = assert_openai_error(reply, 400, param, "invalid_request_error")
    assert f"'{param}'" in error["message"], error
    assert engine.calls == 0 and tuner.calls == []


@pytest.mark.parametrize(
    ("content", "param"), [c[1:] for c in RAW_BAD_REQUESTS], ids=[c[0] for c in RAW_BAD_REQUESTS]
)
def test_body_no_model_could_read_is_400_naming_the_field(
    qwen25: ChatTokenizer, content: bytes, param: str, logs: list[dict[str, Any]]
) -> None:
    async def talk(http: httpx.AsyncClient, tuner: ModelTuner) -> httpx.Response:
        return await http.post(
            "/chat/completions", content=content, headers={"content-type": "application/json"}
        )

    reply, tuner, engine = serve(qwen25, talk)
    error = assert_openai_error(reply, 400, param, "invalid_request_error")
    assert f"'{param}'" in error["message"] and "Traceback" not in error["message"], error
    assert len(error["message"]) < 400, error  # one readable sentence, not the body echoed back
    assert engine.calls == 0 and tuner.calls == []
    assert [e for e in logs if e["log_level"] == "error"] == []


def test_long_conversations_and_nested_schemas_pass_the_depth_check(qwen25: ChatTokenizer) -> None:
    """Many brackets, brackets inside strings, a schema nested 40 levels: all well within the limit."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(40):
        schema = {"type": "object", "properties": {"x": schema}}
    tool = {"type": "function", "function": {"name": "add", "parameters": schema}}
    turns = [{"role": "user", "content": "[{" * 200}, {"role": "assistant", "content": "ok"}] * 30
    body = {**BASE, "messages": [*turns, *BASE["messages"]], "tools": [tool], "tool_choice": "required"}
    reply, tuner, engine = serve(qwen25, post(body))
    assert reply.status_code == 200, reply.text
    assert engine.calls == 1 and len(tuner.calls) == 1


def test_n_above_one_says_only_one_is_supported(qwen25: ChatTokenizer) -> None:
    reply, tuner, _ = serve(qwen25, post({**BASE, "n": 4}))
    error = assert_openai_error(reply, 400, "n", "invalid_request_error")
    assert "only n=1 is supported" in error["message"], error
    assert tuner.calls == []


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"[1, 2]", b'"hi"', b""],
    ids=["broken-json", "json-list", "json-string", "empty"],
)
def test_body_that_is_not_a_json_object_is_400(qwen25: ChatTokenizer, content: bytes) -> None:
    async def talk(http: httpx.AsyncClient, tuner: ModelTuner) -> httpx.Response:
        return await http.post(
            "/chat/completions", content=content, headers={"content-type": "application/json"}
        )

    reply, tuner, engine = serve(qwen25, talk)
    assert_openai_error(reply, 400, None, "invalid_request_error")
    assert engine.calls == 0 and tuner.calls == []


def test_valid_request_still_works_after_bad_ones(qwen25: ChatTokenizer) -> None:
    """Every accepted form in one conversation: parts, developer, tool turns, all sampling fields."""
    body = {
        "model": "m",
        "messages": [
            {"role": "developer", "content": "Be terse."},
            {"role": "user", "content": [{"type": "text", "text": "What is 2 + 3?"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "5"},
            {"role": "system", "content": "Answer now."},
        ],
        "tools": [TOOL],
        "tool_choice": "auto",
        "temperature": 0,
        "top_p": 1,
        "max_tokens": 3,
        "n": 1,
        "seed": 7,
        "stop": ["\n\n"],
        "stream": False,
        "top_k": 20,
        "frequency_penalty": 0.5,
        "user": "someone",
    }

    async def talk(http: httpx.AsyncClient, tuner: ModelTuner) -> tuple[httpx.Response, httpx.Response]:
        bad = await http.post("/chat/completions", json={**body, "temperature": -5})
        good = await http.post("/chat/completions", json=body)
        return bad, good

    (bad, good), tuner, engine = serve(qwen25, talk)
    assert_openai_error(bad, 400, "temperature", "invalid_request_error")
    assert good.status_code == 200, good.text
    choice = good.json()["choices"][0]
    assert choice["finish_reason"] == "length" and len(choice["token_ids"]) == 3
    assert engine.calls == 1
    (call,) = tuner.calls
    prompt = qwen25.decode(call.prompt_ids)
    # A developer message is a system message to models without a developer role.
    assert "<|im_start|>system\nBe terse." in prompt
    assert "What is 2 + 3?" in prompt and "<tool_response>\n5\n</tool_response>" in prompt


def test_valid_minimal_and_streamed_requests(qwen25: ChatTokenizer) -> None:
    async def talk(http: httpx.AsyncClient, tuner: ModelTuner) -> tuple[httpx.Response, httpx.Response]:
        whole = await http.post(
            "/chat/completions", json={**BASE, "temperature": 2, "top_p": 0.5, "seed": None}
        )
        streamed = await http.post(
            "/chat/completions",
            json={
                **BASE,
                "stream": True,
                "stream_options": {"include_usage": True},
                "max_completion_tokens": 100,
            },
        )
        return whole, streamed

    (whole, streamed), tuner, engine = serve(qwen25, talk)
    assert whole.status_code == 200, whole.text
    assert whole.json()["choices"][0]["message"]["content"] == "The answer is 5."
    assert streamed.status_code == 200 and streamed.text.endswith("data: [DONE]\n\n")
    assert '"usage"' in streamed.text
    assert engine.calls == 2 and len(tuner.calls) == 2


def test_a_prompt_that_overflows_the_context_ends_in_length_as_recorded(qwen25: ChatTokenizer) -> None:
    """OpenAI's finish_reason for running out of context is `length`; the record says why exactly."""

    async def talk(http: httpx.AsyncClient, tuner: ModelTuner) -> tuple[httpx.Response, httpx.Response]:
        whole = await http.post("/chat/completions", json=BASE)
        streamed = await http.post("/chat/completions", json={**BASE, "stream": True})
        return whole, streamed

    # the prompt is about 35 tokens: with a 32-token reply budget it does not fit in 48
    settings = TrackerSettings(max_model_len=48, max_response_length_in_one_turn=32)
    (whole, streamed), tuner, engine = serve(qwen25, talk, settings=settings)
    assert whole.status_code == 200 and streamed.status_code == 200, (whole.text, streamed.text)
    choice = whole.json()["choices"][0]
    assert (choice["finish_reason"], choice["message"]["content"], choice["token_ids"]) == ("length", "", [])
    assert '"finish_reason": "length"' in streamed.text and '"finish_reason": "stop"' not in streamed.text
    assert engine.calls == 0
    assert [call.finish_reason for call in tuner.calls] == ["context_overflow", "context_overflow"]


def test_openai_sdk_raises_bad_request_error(qwen25: ChatTokenizer) -> None:
    async def talk(http: httpx.AsyncClient, tuner: ModelTuner) -> openai.BadRequestError:
        client = tuner.openai_client(max_retries=0)
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="m", messages=BASE["messages"], temperature=-5)
        return caught.value

    error, tuner, engine = serve(qwen25, talk)
    assert error.status_code == 400
    assert (error.type, error.param, error.code) == ("invalid_request_error", "temperature", None)
    assert "'temperature'" in error.message
    assert engine.calls == 0 and tuner.calls == []


def test_unknown_rollout_is_openai_style_404(qwen25: ChatTokenizer) -> None:
    async def main() -> httpx.Response:
        async with Gateway() as gateway, httpx.AsyncClient(base_url=gateway.url) as http:
            return await http.post("/rollout/nope/default/v1/chat/completions", json=BASE)

    reply = asyncio.run(main())
    error = assert_openai_error(reply, 404, None, "invalid_request_error")
    assert "no live rollout 'nope'" in error["message"]


def test_engine_failure_is_json_500_logged_with_rollout_id(
    qwen25: ChatTokenizer, logs: list[dict[str, Any]]
) -> None:
    def respond(prompt: str) -> str:
        raise RuntimeError("engine on fire")

    reply, _, _ = serve(qwen25, post(BASE), respond=respond)
    error = assert_openai_error(reply, 500, None, "server_error")
    assert "RuntimeError: engine on fire" in error["message"]
    (entry,) = [e for e in logs if e.get("rollout_id") == ROLLOUT]
    assert entry["log_level"] == "error" and entry["agent"] == "default"


def test_unexpected_handler_error_is_json_500_logged_with_rollout_id(
    qwen25: ChatTokenizer, monkeypatch: pytest.MonkeyPatch, logs: list[dict[str, Any]]
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("shape")

    monkeypatch.setattr(gateway_module, "completion", broken)
    monkeypatch.setattr(gateway_module, "completion_chunks", broken)

    async def talk(http: httpx.AsyncClient, tuner: ModelTuner) -> tuple[httpx.Response, httpx.Response]:
        whole = await http.post("/chat/completions", json=BASE)
        streamed = await http.post("/chat/completions", json={**BASE, "stream": True})
        return whole, streamed

    (whole, streamed), _, _ = serve(qwen25, talk)
    for reply in (whole, streamed):
        error = assert_openai_error(reply, 500, None, "server_error")
        assert "KeyError" in error["message"] and "shape" in error["message"]
    assert len([e for e in logs if e.get("rollout_id") == ROLLOUT and e["log_level"] == "error"]) == 2
