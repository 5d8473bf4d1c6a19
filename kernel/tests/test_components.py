from types import SimpleNamespace

import pytest
from pydantic import BaseModel

from astuner import JudgeOutput, hookimpl
from astuner.components import (
    Engines,
    auxiliary_engine_model,
    build,
    build_judge,
    judge_engine_model,
    main_engine_model,
)
from astuner.config import AstunerConfig, load_config
from astuner.errors import ConfigError
from astuner.rollout.engine_model import EngineModel


class PickySettings(BaseModel):
    threshold: float = 0.5


class ServicedJudge:
    """A judge that names every service a judge may ask for, and a `config` it must not get."""

    def __init__(
        self,
        settings: PickySettings,
        engines=None,
        judge_model=None,
        run_folder=None,
        settings_of=None,
        config=None,
    ) -> None:
        self.settings, self.engines, self.judge_model = settings, engines, judge_model
        self.run_folder, self.settings_of, self.config = run_folder, settings_of, config

    async def judge(self, task, output):
        return JudgeOutput(reward=self.settings.threshold)


def test_factories_get_the_services_they_name_and_never_the_config(plugins, write_config, tmp_path) -> None:
    def register_judges(register):
        register("picky", ServicedJudge, settings=PickySettings)

    plugins.add(SimpleNamespace(register_judges=hookimpl(register_judges)), name="picky_plugin")
    path = write_config(
        {
            "task_judge": {
                "judge_protocol": "picky",
                "alien_llm_model": "judge-7b",
                "alien_llm_response_length": 77,
                "picky": {"threshold": 0.9},
            },
            "task_reader": {"type": "jsonl", "jsonl": {"training_file": "t.jsonl"}},
        }
    )
    config = load_config(path, environ={})
    judge = build(config, plugins, "judge", "picky", run_folder=tmp_path)
    assert judge.settings.threshold == 0.9
    assert judge.config is None
    assert isinstance(judge.engines, Engines)
    assert judge.judge_model == EngineModel(path="judge-7b", max_tokens=77)
    assert judge.run_folder == tmp_path
    assert judge.settings_of("reader", "jsonl").training_file.name == "t.jsonl"


def test_factories_without_those_parameters_get_only_settings(plugins) -> None:
    judge = build_judge(load_config(None, environ={}), plugins)
    assert type(judge).__name__ == "ExactJudge"


def test_engine_models_come_from_their_own_blocks(write_config) -> None:
    """The main model's values never reach an auxiliary model's engine, nor the other way round."""
    path = write_config(
        {
            "model": {"path": "policy"},
            "rollout": {
                "engine_url": "http://main",
                "max_model_len": 3000,
                "max_response_length_in_one_turn": 500,
                "tensor_model_parallel_size": 2,
            },
            "trainer_common": {"seed": 7},
            "auxiliary_models": {"critic": {"path": "critic-1b", "engine": "openai", "max_tokens": 64}},
        }
    )
    config = load_config(path, environ={})
    assert main_engine_model(config) == EngineModel(
        path="policy", url="http://main", max_model_len=3000, max_tokens=500, tensor_parallel_size=2, seed=7
    )
    assert auxiliary_engine_model(config, "critic") == EngineModel(path="critic-1b", max_tokens=64, seed=7)
    assert judge_engine_model(config) is None


def test_the_main_model_carries_each_agents_saved_adapter_not_new_ones() -> None:
    agents = ["agents.wolf.lora.path=ckpt/adapters/wolf", "agents.seer.lora.rank=4"]
    config = load_config(None, ["model.path=policy", *agents], environ={})
    assert main_engine_model(config).adapters == {"wolf": "ckpt/adapters/wolf"}
    assert main_engine_model(load_config(None, ["model.path=policy"], environ={})).adapters == {}


def _recording_engines(plugins) -> list:
    built: list = []

    class EchoSettings(BaseModel, extra="forbid"):
        reply: str = "hi"

    def make(settings: EchoSettings, model: EngineModel):
        built.append((settings, model))
        return SimpleNamespace(settings=settings, model=model)

    def bare(model: EngineModel):
        built.append((None, model))
        return SimpleNamespace(model=model)

    def register_engines(register):
        register("echo", make, settings=EchoSettings)
        register("bare", bare)

    plugins.add(SimpleNamespace(register_engines=hookimpl(register_engines)), name="echo_engines")
    return built


def test_engines_build_any_engine_from_a_raw_block_without_a_config(plugins, monkeypatch) -> None:
    built = _recording_engines(plugins)
    monkeypatch.setattr(AstunerConfig, "model_copy", _no_copy)
    engines = Engines(plugins)
    model = EngineModel(path="judge-7b", max_tokens=9)
    echo = engines.build("echo", {"reply": "yes"}, model, key="task_judge.x.engine_settings")
    assert (echo.settings.reply, echo.model) == ("yes", model)
    assert engines.build("bare", {}, model).model is model
    assert len(built) == 2


def test_engines_name_the_key_of_a_bad_setting_or_engine(plugins) -> None:
    _recording_engines(plugins)
    engines = Engines(plugins)
    model = EngineModel(path="m")
    with pytest.raises(ConfigError, match=r"task_judge\.x\.engine_settings\.replyy"):
        engines.build("echo", {"replyy": "no"}, model, key="task_judge.x.engine_settings")
    with pytest.raises(ConfigError, match=r"task_judge\.x\.engine_settings: .*'ehco'"):
        engines.build("ehco", {}, model, key="task_judge.x.engine_settings")
    with pytest.raises(ConfigError, match="engine 'bare' takes no settings"):
        engines.build("bare", {"reply": "x"}, model)


def _no_copy(self: AstunerConfig, *args, **kwargs) -> AstunerConfig:
    raise AssertionError("an engine was built from a copy of the config")


def test_no_config_copy_builds_an_auxiliary_engine(plugins, write_config, monkeypatch) -> None:
    from astuner.components import build_auxiliary_engine

    built = _recording_engines(plugins)
    path = write_config(
        {
            "auxiliary_models": {
                "critic": {"path": "critic-1b", "engine": "echo", "engines": {"echo": {"reply": "ok"}}}
            }
        }
    )
    config = load_config(path, environ={})
    monkeypatch.setattr(AstunerConfig, "model_copy", _no_copy)
    engine = build_auxiliary_engine(config, plugins, "critic")
    assert (engine.settings.reply, engine.model.path) == ("ok", "critic-1b")
    assert built == [(engine.settings, engine.model)]
