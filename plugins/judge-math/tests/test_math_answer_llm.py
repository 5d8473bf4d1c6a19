"""Judge `math_answer_llm` with scripted auxiliary models: a token engine, and a real HTTP endpoint."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import astuner_engine_openai.engine as openai_plugin
import astuner_judge_math.plugin
import pytest
from astuner_judge_math.llm_judge import MathAnswerLlmJudge, MathAnswerLlmSettings, parse_verdict
from fastapi import FastAPI
from pydantic import BaseModel
from typer.testing import CliRunner

from astuner import hookimpl
from astuner.cli import make_app
from astuner.components import Engines, build_judge, judge_engine_model
from astuner.config import AstunerConfig, load_config
from astuner.core.task import Task, WorkflowOutput
from astuner.core.tokenizer import ChatTokenizer
from astuner.errors import ConfigError
from astuner.plugins import Plugins
from astuner.rollout.engine_model import EngineModel
from astuner.serving import ThreadedServer
from astuner.testing.engines import ScriptedEngine
from astuner.testing.records import rollout_rows
from astuner.testing.tokenizers import qwen25_tokenizer

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


def judge_for(config: AstunerConfig, plugins: Plugins) -> MathAnswerLlmJudge:
    """The judge as the kernel builds it: its block, the `engines` and `judge_model` services."""
    settings = MathAnswerLlmSettings.model_validate(
        config.task_judge.model_extra.get("math_answer_llm") or {}
    )
    return MathAnswerLlmJudge(settings, Engines(plugins), judge_engine_model(config))


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
    judge = judge_for(load_config(write_judge_config(write_config, endpoint.server.url + "/v1")), plugins)

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
    endpoint.status = 503
    verdict = run(judge_for(load_config(path), plugins), WRONG_FORM)
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
    judge = judge_for(load_config(write_config({"task_judge": {"alien_llm_model": "judge-model"}})), plugins)
    with pytest.raises(ConfigError, match=r"engine_settings"):
        run(judge, WRONG_FORM)


def test_a_misspelled_engine_setting_names_its_key(write_config, plugins) -> None:
    judge = judge_for(
        load_config(
            write_config(
                {
                    "task_judge": {
                        "alien_llm_model": "judge-model",
                        "math_answer_llm": {"engine_settings": {"base_ur": "http://x/v1"}},
                    }
                }
            )
        ),
        plugins,
    )
    with pytest.raises(ConfigError, match=r"task_judge\.math_answer_llm\.engine_settings\.base_ur"):
        run(judge, WRONG_FORM)


WORKFLOW = """
from astuner import WorkflowOutput


async def workflow(task, model):
    reply = await model.chat([{"role": "user", "content": task["main_query"]}])
    return WorkflowOutput(response=reply.content)
"""


class OracleSettings(BaseModel, extra="forbid"):
    """Engine `oracle`'s own block: it calls an answer correct when the reference is below this."""

    correct_below: int = 1000


def test_a_run_builds_its_judge_engine_from_the_judge_block_without_copying_the_config(
    plugins: Plugins, write_config, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real debug run: the policy never answers in a form the rule reads, so every reward is the
    judge engine's verdict (correct when the reference is below 5, as the engine's own block says),
    and no config copy is ever made."""
    tokenizer_dir = workdir / "tokenizer"
    qwen25_tokenizer().save_pretrained(tokenizer_dir)
    oracles: list[tuple[OracleSettings, EngineModel, ScriptedEngine]] = []
    verdicts: list[float] = []

    def policy(model: EngineModel) -> ScriptedEngine:
        engine = ScriptedEngine(ChatTokenizer(qwen25_tokenizer()), lambda prompt: "I would rather not say.")
        engine.tokenizer_path = str(tokenizer_dir)
        return engine

    def oracle(settings: OracleSettings, model: EngineModel) -> ScriptedEngine:
        def respond(prompt: str) -> str:
            reference = int(prompt.split("Reference answer:")[1].split()[0])
            verdicts.append(float(reference < settings.correct_below))
            return "<Correct>" if verdicts[-1] else "<NotCorrect>"

        engine = ScriptedEngine(ChatTokenizer(qwen25_tokenizer()), respond)
        oracles.append((settings, model, engine))
        return engine

    def register_engines(register) -> None:
        register("policy", policy)
        register("oracle", oracle, settings=OracleSettings)

    plugins.add(SimpleNamespace(register_engines=hookimpl(register_engines)), name="test_engines")
    plugins.add(astuner_judge_math.plugin, name="judge_math")
    (workdir / "plain_workflow.py").write_text(WORKFLOW)
    conf = write_config(
        {
            "experiment_name": "llm_judged",
            "task_reader": {"type": "arith"},
            "task_judge": {
                "judge_protocol": "math_answer_llm",
                "alien_llm_model": "judge-model-7b",
                "alien_llm_response_length": 32,
                "math_answer_llm": {"engine": "oracle", "engine_settings": {"correct_below": 5}},
            },
            "rollout": {"agentscope_workflow": "plain_workflow->workflow", "engine": "policy"},
            "debug": {"debug_first_n_tasks": 4, "num_repeat": 1},
        }
    )

    def no_copy(self: AstunerConfig, *args: Any, **kwargs: Any) -> AstunerConfig:
        raise AssertionError("the config was copied")

    monkeypatch.setattr(AstunerConfig, "model_copy", no_copy)
    result = CliRunner().invoke(make_app(plugins), ["run", "--conf", str(conf), "--backbone", "debug"])
    assert result.exit_code == 0, result.output
    ((settings, model, engine),) = oracles
    assert settings == OracleSettings(correct_below=5)
    assert (model.path, model.max_tokens, model.url) == ("judge-model-7b", 32, None)
    (records,) = (workdir / "launcher_record" / "llm_judged").glob("*/rollouts/debug.jsonl")
    rows = rollout_rows(records)
    assert len(rows) == 4 and engine.calls == 4
    assert all(row["metrics"]["judge/llm_calls"] == 1.0 for row in rows)
    assert sorted(row["reward"] for row in rows) == sorted(verdicts)
    assert set(verdicts) == {0.0, 1.0}  # both verdicts came through (the rule alone gives 0.0)
