"""`tune(auxiliary_models=...)`: `TunerModelConfig`s as `auxiliary_models.<name>`, used by both functions."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from tuner_parts import answer

from astuner import (
    AlgorithmConfig,
    DatasetConfig,
    JudgeOutput,
    TunerModelConfig,
    WorkflowOutput,
    hookimpl,
    tune,
)
from astuner.core.merge import merge_trajectory
from astuner.core.tokenizer import ChatTokenizer
from astuner.errors import ConfigError
from astuner.record import read_trajectories
from astuner.testing.engines import ScriptedEngine
from astuner.testing.tokenizers import qwen25_tokenizer
from astuner.tuner import tune_config


async def answer_and_review(task: dict, model, auxiliary_models: dict | None = None) -> WorkflowOutput:
    call = await model.chat([{"role": "user", "content": task["question"]}])
    review = await auxiliary_models["judge"].chat([{"role": "user", "content": f"Review: {call.content}"}])
    return WorkflowOutput(response=call.content, metadata={"review": review.content})


async def llm_judge(task: dict, response: str | None, auxiliary_models: dict | None = None) -> JudgeOutput:
    question = f"Is {response} right for: {task['question']}"
    verdict = await auxiliary_models["judge"].chat([{"role": "user", "content": question}])
    correct = verdict.content == "<Correct>"
    return JudgeOutput(reward=float(correct), is_success=correct)


def oracle(prompt: str) -> str:
    """A judge with its own opinion: it calls "4" right for 3 + 3 only (the exact rule would disagree)."""
    if "Review:" in prompt:
        return "reviewed"
    return "<Correct>" if "What is 3 + 3?" in prompt else "<NotCorrect>"


@pytest.fixture
def with_judge_engine(scripted: SimpleNamespace) -> SimpleNamespace:
    """The `scripted` fixture plus engine `oracle` (see `oracle`); `.judges`: the oracle engines built."""
    judges: list[ScriptedEngine] = []

    def make_engine(model) -> ScriptedEngine:
        engine = ScriptedEngine(ChatTokenizer(qwen25_tokenizer()), oracle)
        engine.tokenizer_path = str(scripted.tokenizer_dir)
        judges.append(engine)
        return engine

    def register_engines(register) -> None:
        register("oracle", make_engine)

    scripted.plugins.add(SimpleNamespace(register_engines=hookimpl(register_engines)), name="oracle_engine")
    scripted.judges = judges
    return scripted


def test_auxiliary_models_are_config_keys_laid_like_the_model(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    block = {"judge": {"path": "from-file", "engine": "openai", "engine_url": "http://127.0.0.1:9/v1"}}
    block["judge"].update({"temperature": 0.5, "max_tokens": 100})
    path.write_text(yaml.safe_dump({"astuner": {"auxiliary_models": block}}), encoding="utf-8")
    config = tune_config(
        workflow_func=answer,
        config_path=path,
        auxiliary_models={
            "judge": TunerModelConfig(model_path="judge-model", max_model_len=512, temperature=0.0),
            "helper": TunerModelConfig(
                model_path="helper-model", max_model_len=256, tool_call_parser="llama3_json"
            ),
        },
        overrides=["auxiliary_models.judge.top_p=0.5"],
    )
    judge, helper = config.auxiliary_models["judge"], config.auxiliary_models["helper"]
    # stated in the call > the file > TunerModelConfig's defaults; overrides on top
    assert (judge.path, judge.temperature, judge.max_model_len) == ("judge-model", 0.0, 512)
    assert (judge.engine, judge.engine_url, judge.max_tokens, judge.top_p) == (
        "openai",
        "http://127.0.0.1:9/v1",
        100,
        0.5,
    )
    assert (helper.path, helper.engine, helper.temperature, helper.max_tokens, helper.tool_parser) == (
        "helper-model",
        "auto",
        1.0,
        8192,
        "llama3_json",
    )


@pytest.mark.parametrize(
    ("auxiliary", "message"),
    [
        ({"my.judge": TunerModelConfig(model_path="m", max_model_len=8)}, r"the name 'my\.judge' must start"),
        ({"judge": {"model_path": "m"}}, r"\{'judge': \.\.\.\}\) takes a TunerModelConfig, not a dict"),
        ([TunerModelConfig(model_path="m", max_model_len=8)], r"takes a dict of names to TunerModelConfig"),
        (
            {"judge": TunerModelConfig(model_path="m", max_model_len=8, inference_engine_num=2)},
            r"inference_engine_num=2\)\}\): one engine serves an auxiliary model",
        ),
    ],
)
def test_auxiliary_mistakes_are_refused(auxiliary: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        tune_config(workflow_func=answer, auxiliary_models=auxiliary)


def test_debug_run_with_an_auxiliary_judge_end_to_end(
    dataset_dir: Path, with_judge_engine: SimpleNamespace, workdir: Path
) -> None:
    scripted = with_judge_engine
    result = tune(
        workflow_func=answer_and_review,
        judge_func=llm_judge,
        train_dataset=DatasetConfig(path=str(dataset_dir)),
        model=TunerModelConfig(model_path=str(scripted.tokenizer_dir), max_model_len=512, max_tokens=8),
        auxiliary_models={
            "judge": TunerModelConfig(
                model_path=str(scripted.tokenizer_dir), max_model_len=512, temperature=0.0, max_tokens=12
            )
        },
        backbone="debug",
        overrides=[
            "rollout.engine=scripted",
            "auxiliary_models.judge.engine=oracle",
            "debug.debug_first_n_tasks=4",
        ],
        plugins=scripted.plugins,
    )
    (judge_engine,) = scripted.judges
    assert judge_engine.calls == 8  # a review and a verdict per rollout
    saved = yaml.safe_load((result.experiment_dir / "config.yaml").read_text())["astuner"]
    assert saved["auxiliary_models"]["judge"]["engine"] == "oracle"
    assert saved["auxiliary_models"]["judge"]["temperature"] == 0.0
    trajectories = read_trajectories(result.experiment_dir / "rollouts" / "debug.jsonl")
    # the main model always says 4; the auxiliary judge alone decides the reward
    assert {t.task_id: t.reward for t in trajectories} == {
        "train-0": 0.0,
        "train-1": 1.0,
        "train-2": 0.0,
        "train-3": 0.0,
    }
    for t in trajectories:
        assert t.metadata["workflow_output"]["metadata"]["review"] == "reviewed"
        assert [(c.agent_name, c.trainable) for c in t.auxiliary_calls] == [("judge", False)] * 2
        (call,) = t.calls
        assert call.content == "4" and call.trainable
        (sample,) = merge_trajectory(t)[0]
        assert sample.input_ids == call.prompt_ids + call.response_ids


def test_an_unknown_auxiliary_engine_fails_before_the_run(
    dataset_dir: Path, with_judge_engine: SimpleNamespace, workdir: Path
) -> None:
    with pytest.raises(ConfigError, match=r"auxiliary_models\.judge\.engine: No engine named 'oracel'"):
        tune(
            workflow_func=answer_and_review,
            train_dataset=DatasetConfig(path=str(dataset_dir)),
            auxiliary_models={"judge": TunerModelConfig(model_path="m", max_model_len=64)},
            backbone="debug",
            overrides=["rollout.engine=scripted", "auxiliary_models.judge.engine=oracel"],
            plugins=with_judge_engine.plugins,
        )
    assert not (workdir / "launcher_record").exists()


@pytest.mark.slow
def test_torch_training_with_the_tiny_model_as_a_transformers_auxiliary_judge(
    dataset_dir: Path, tiny_model_dir: Path, workdir: Path
) -> None:
    """The judge's reward comes from a real model's sampled tokens; only the policy's calls are trained."""

    async def token_judge(
        task: dict, response: str | None, auxiliary_models: dict | None = None
    ) -> JudgeOutput:
        verdict = await auxiliary_models["judge"].chat([{"role": "user", "content": f"Grade: {response}"}])
        return JudgeOutput(reward=float(verdict.response_ids[0] % 2))

    result = tune(
        workflow_func=answer,
        judge_func=token_judge,
        train_dataset=DatasetConfig(path=str(dataset_dir), total_steps=1),
        model=TunerModelConfig(model_path=str(tiny_model_dir), max_model_len=1024, max_tokens=8),
        auxiliary_models={
            "judge": TunerModelConfig(model_path=str(tiny_model_dir), max_model_len=1024, max_tokens=6)
        },
        algorithm=AlgorithmConfig(group_size=2, batch_size=2, learning_rate=1e-3),
        # the random policy writes noise, which the default madness check would penalise
        overrides=["auxiliary_models.judge.engine=transformers", "rollout.compute_madness_checklist=[]"],
    )
    trajectories = read_trajectories(result.experiment_dir / "rollouts" / "step_1.jsonl")
    assert len(trajectories) == 4
    tokenizer = ChatTokenizer(qwen25_tokenizer())
    for t in trajectories:
        (verdict,) = t.auxiliary_calls
        assert (verdict.agent_name, verdict.trainable) == ("judge", False)
        assert 0 < len(verdict.response_ids) <= 6
        assert verdict.response_logprobs and len(verdict.response_logprobs) == len(verdict.response_ids)
        assert f"Grade: {t.calls[0].content}" in tokenizer.decode(verdict.prompt_ids)
        assert t.reward == float(verdict.response_ids[0] % 2)
    # one policy call per rollout was merged into training; the judge's four were not
    assert result.metrics["train/calls_merged"] == 4
    assert result.checkpoint == result.experiment_dir / "checkpoints" / "step_1"
