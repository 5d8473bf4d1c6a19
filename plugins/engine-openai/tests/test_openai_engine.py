"""Engine `openai` against a real OpenAI-compatible endpoint on 127.0.0.1: retries and Retry-After."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from astuner_engine_openai import OpenAIChatEngine, OpenAIEngineSettings
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from astuner.api import AstunerError, ChatReply, EngineModel, SamplingParams, ThreadedServer

SAMPLING = SamplingParams(temperature=0.0, max_tokens=16)
MESSAGES = [{"role": "user", "content": "Is 10 ten?"}]


class RateLimitedEndpoint:
    """/v1/chat/completions that answers 429 (with `retry_after`) `limited` times, then a completion."""

    def __init__(self) -> None:
        self.limited = 0
        self.retry_after = "0"
        self.requests: list[tuple[float, dict[str, Any]]] = []
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(body: dict[str, Any]) -> Any:
            self.requests.append((time.monotonic(), body))
            if len(self.requests) <= self.limited:
                return JSONResponse(
                    {"error": {"message": "Rate limit reached", "type": "rate_limit_exceeded"}},
                    status_code=429,
                    headers={"Retry-After": self.retry_after},
                )
            tool_call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            message = {"role": "assistant", "content": "<Correct>", "tool_calls": [tool_call]}
            return {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "length"}],
            }

        self.server = ThreadedServer(app)


@pytest.fixture
def endpoint() -> Iterator[RateLimitedEndpoint]:
    fake = RateLimitedEndpoint()
    with fake.server:
        yield fake


def chat(endpoint: RateLimitedEndpoint, **settings: Any) -> ChatReply:
    engine = OpenAIChatEngine(
        OpenAIEngineSettings(base_url=endpoint.server.url + "/v1", model="judge-7b", **settings),
        EngineModel(path="judge-7b"),
    )

    async def go() -> ChatReply:
        try:
            return await engine.chat(MESSAGES, None, SAMPLING)
        finally:
            await engine.aclose()

    return asyncio.run(go())


def test_429s_are_retried_until_the_endpoint_answers(endpoint: RateLimitedEndpoint) -> None:
    endpoint.limited = 2
    reply = chat(endpoint)
    assert len(endpoint.requests) == 3
    assert reply.content == "<Correct>" and reply.finish_reason == "length"
    assert reply.tool_calls == [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ]
    body = endpoint.requests[-1][1]
    assert body["model"] == "judge-7b" and body["messages"] == MESSAGES
    assert body["max_tokens"] == 16 and body["temperature"] == 0.0 and "tools" not in body


def test_the_wait_before_a_retry_is_the_servers_retry_after(endpoint: RateLimitedEndpoint) -> None:
    endpoint.limited, endpoint.retry_after = 1, "1"
    assert chat(endpoint).content == "<Correct>"
    (first, _), (second, _) = endpoint.requests
    assert second - first >= 1.0  # the SDK's own first back-off is 0.5 s at most


def test_with_no_retries_a_429_is_an_error_naming_the_endpoint(endpoint: RateLimitedEndpoint) -> None:
    endpoint.limited = 1
    with pytest.raises(AstunerError) as error:
        chat(endpoint, max_retries=0)
    assert len(endpoint.requests) == 1
    message = str(error.value)
    assert f"{endpoint.server.url}/v1/chat/completions" in message and "429" in message
    assert "Rate limit reached" in message and "max_retries" in message


def test_retries_are_a_setting_with_a_default() -> None:
    field = OpenAIEngineSettings.model_fields["max_retries"]
    assert OpenAIEngineSettings().max_retries == 4 and field.description
    with pytest.raises(ValueError):
        OpenAIEngineSettings(max_retries=-1)
