"""Judge `math_answer_llm` with scripted auxiliary models: a token engine, and a real HTTP endpoint."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import astuner_engine_openai.engine as openai_plugin
import astuner_judge_math.plugin
import pytest
from astuner_judge_math.llm_judge import MathAnswerLlmJudge, MathAnswerLlmSettings, parse_verdict
from fastapi import FastAPI

from astuner.components import build_judge
from astuner.config import load_config
from astuner.core.task import Task, WorkflowOutput
from astuner.errors import ConfigError
from astuner.plugins import Plugins
from astuner.serving import ThreadedServer
from astuner.testing.engines import ScriptedEngine

TASK = Task(
    task_id="t",
    main_query="Weng earns $12 an hour. How much for 50 minutes?",
    metadata={"answer": "Weng earns 12/60 = $0.2 per minute.\n#### 10"},
)
WRONG_FORM = WorkflowOutput(response="She earned ten dollars.", metadata={"final_answer": "ten dollars"})


@pytest.fixture
def plugins(plugins: Plugins) -> Plugins:
    """The kernel's plugins and engine `openai` (astuner-engine-openai), the judge's default engine."""
    plugins.add(openai_plugin, name="engine_openai")
    return plugins


def run(judge: MathAnswerLlmJudge, output: WorkflowOutput) -> Any:
    return asyncio.run(judge.judge(TASK, output))


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ("<Correct>", True),
        ("<NotCorrect>", False),
        ("  <Correct>  \n", True),
        ("Ten equals 10.\n<Correct>", True),
        ("The values differ.\n<NotCorrect>", False),
        ("correct", None),
        ("<Correct> because ten is 10", None),
        ("<Correct>\n<NotCorrect>", None),
        ("I would say <NotCorrect> at first, but\n<Correct>", None),
        ("<correct>", None),
        ("", None),
        ("Yes", None),
    ],
)
def test_verdicts_are_parsed_strictly(reply: str, verdict: bool | None) -> None:
    assert parse_verdict(reply) is verdict


@pytest.mark.parametrize(
    ("reply", "reward", "unparsed"),
    [("<Correct>", 1.0, 0.0), ("<NotCorrect>", 0.0, 0.0), ("The answer looks fine to me!", 0.0, 1.0)],
    ids=["agree", "disagree", "garbage"],
)
def test_scripted_token_engine_agree_disagree_garbage(
    qwen25, reply: str, reward: float, unparsed: float
) -> None:
    prompts: list[str] = []

    def respond(prompt: str) -> str:
        prompts.append(prompt)
        return reply

    engine = ScriptedEngine(qwen25, respond)
    judge = MathAnswerLlmJudge(MathAnswerLlmSettings(), engine=engine)
    verdict = run(judge, WRONG_FORM)
    assert (verdict.reward, verdict.is_success) == (reward, reward == 1.0)
    assert engine.calls == 1
    assert "Reference answer:\n10" in prompts[0]
    assert "Student's final answer:\nten dollars" in prompts[0]
    assert "<Correct>" in prompts[0] and "<NotCorrect>" in prompts[0]
    m = verdict.metrics
    assert m["judge/llm_calls"] == 1.0
    assert m["judge/llm_unparsed"] == unparsed
    assert m["judge/llm_prompt_tokens"] == len(qwen25.encode(prompts[0]))
    assert m["judge/llm_response_tokens"] == len(qwen25.encode(reply)) + 1  # + end of turn
    assert m["judge/llm_seconds"] >= 0


def test_rule_match_never_asks_the_model(qwen25) -> None:
    engine = ScriptedEngine(qwen25, lambda prompt: "<NotCorrect>")
    judge = MathAnswerLlmJudge(MathAnswerLlmSettings(), engine=engine)
    verdict = run(judge, WorkflowOutput(response="So she earned \\boxed{10}."))
    assert (verdict.reward, verdict.is_success) == (1.0, True)
    assert engine.calls == 0
    assert verdict.metrics["judge/llm_calls"] == 0.0


def test_empty_response_is_wrong_without_asking(qwen25) -> None:
    engine = ScriptedEngine(qwen25, lambda prompt: "<Correct>")
    verdict = run(MathAnswerLlmJudge(MathAnswerLlmSettings(), engine=engine), WorkflowOutput(response=""))
    assert verdict.reward == 0.0
    assert engine.calls == 0


class FakeOpenAIEndpoint:
    """A real HTTP server on 127.0.0.1 speaking /v1/chat/completions with scripted replies."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.reply = "<Correct>"
        self.status = 200
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(body: dict[str, Any]) -> Any:
            from fastapi.responses import JSONResponse

            self.requests.append(body)
            if self.status != 200:
                return JSONResponse({"error": "overloaded"}, status_code=self.status)
            message = {"role": "assistant", "content": self.reply}
            return {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}

        self.server = ThreadedServer(app)


@pytest.fixture
def endpoint() -> Iterator[FakeOpenAIEndpoint]:
    fake = FakeOpenAIEndpoint()
    with fake.server:
        yield fake


def write_judge_config(write_config, url: str, **judge_block: Any) -> Any:
    return write_config(
        {
            "task_judge": {
                "judge_protocol": "math_answer_llm",
                "alien_llm_model": "judge-model-7b",
                "alien_llm_response_length": 64,
                "math_answer_llm": {"engine": "openai", "engine_settings": {"base_url": url}, **judge_block},
            }
        }
    )


def test_openai_endpoint_from_config_alien_llm_model(endpoint, write_config, plugins) -> None:
    config = load_config(write_judge_config(write_config, endpoint.server.url + "/v1"))
    settings = MathAnswerLlmSettings.model_validate(config.task_judge.model_extra["math_answer_llm"])
    judge = MathAnswerLlmJudge(settings, config, plugins)

    async def three_verdicts() -> list[float]:
        rewards = []
        for reply in ("<Correct>", "<NotCorrect>", "no idea"):
            endpoint.reply = reply
            rewards.append((await judge.judge(TASK, WRONG_FORM)).reward)
        await judge.aclose()
        return rewards

    assert asyncio.run(three_verdicts()) == [1.0, 0.0, 0.0]
    assert len(endpoint.requests) == 3
    body = endpoint.requests[0]
    assert body["model"] == "judge-model-7b"
    assert body["max_tokens"] == 64
    assert body["temperature"] == 0.0
    assert [m["role"] for m in body["messages"]] == ["system", "user"]


def test_endpoint_failure_keeps_the_rule_verdict(endpoint, write_config, plugins) -> None:
    url = endpoint.server.url + "/v1"
    # max_retries 0: the engine would otherwise retry the 503 with back-off (see test_openai_engine.py).
    path = write_judge_config(write_config, url, engine_settings={"base_url": url, "max_retries": 0})
    config = load_config(path)
    settings = MathAnswerLlmSettings.model_validate(config.task_judge.model_extra["math_answer_llm"])
    endpoint.status = 503
    verdict = run(MathAnswerLlmJudge(settings, config, plugins), WRONG_FORM)
    assert verdict.reward == 0.0
    assert verdict.metrics["judge/llm_errors"] == 1.0
    assert len(endpoint.requests) == 1


def test_registered_judge_builds_from_its_block(endpoint, write_config, plugins) -> None:
    plugins.add(astuner_judge_math.plugin, name="judge_math")
    path = write_judge_config(write_config, endpoint.server.url + "/v1", model="block-model")
    judge = build_judge(load_config(path), plugins)
    assert run(judge, WRONG_FORM).reward == 1.0
    assert endpoint.requests[-1]["model"] == "block-model"


def test_missing_model_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"task_judge\.math_answer_llm\.model"):
        MathAnswerLlmJudge(MathAnswerLlmSettings())


def test_missing_endpoint_names_the_settings_block(write_config, plugins) -> None:
    config = load_config(write_config({"task_judge": {"alien_llm_model": "judge-model"}}))
    judge = MathAnswerLlmJudge(MathAnswerLlmSettings(), config, plugins)
    with pytest.raises(ConfigError, match=r"engine_settings"):
        run(judge, WRONG_FORM)
