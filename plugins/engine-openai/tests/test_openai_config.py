"""Configs that name engine `openai` reach this plugin: `rollout.engine`, auxiliary models, settings."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import astuner_engine_openai.engine as openai_plugin
import pytest
from astuner_engine_openai import OpenAIChatEngine

from astuner.api import ConfigError
from astuner.components import build_auxiliary_engine, build_engine
from astuner.training import Plugins, load_config


@pytest.fixture
def with_openai(plugins: Plugins) -> Plugins:
    plugins.add(openai_plugin, name="engine_openai")
    return plugins


def test_rollout_engine_openai_builds_this_engine_with_its_block(with_openai: Plugins) -> None:
    overrides = [
        "rollout.engine=openai",
        "rollout.engine_url=http://127.0.0.1:9/v1/",
        "model.path=judge-7b",
        "rollout.engines.openai.max_retries=0",
    ]
    built = build_engine(load_config(None, overrides, environ={}), with_openai)
    asyncio.run(built.aclose())
    assert isinstance(built, OpenAIChatEngine) and not built.trainable
    assert (built.base_url, built.model, built.max_retries) == ("http://127.0.0.1:9/v1", "judge-7b", 0)


def test_an_auxiliary_model_on_openai_gets_its_own_endpoint_and_name(
    with_openai: Plugins, tmp_path: Path
) -> None:
    conf = tmp_path / "conf.yaml"
    conf.write_text(
        textwrap.dedent(
            """
            astuner:
              rollout: {engine_url: http://127.0.0.1:9/v1}
              auxiliary_models:
                critic:
                  path: qwen-max
                  engine: openai
                  engines: {openai: {base_url: "http://127.0.0.1:8/v1", api_key_env: CRITIC_KEY}}
            """
        )
    )
    built = build_auxiliary_engine(load_config(conf, environ={}), with_openai, "critic")
    asyncio.run(built.aclose())
    assert isinstance(built, OpenAIChatEngine)
    assert (built.base_url, built.model) == ("http://127.0.0.1:8/v1", "qwen-max")


def test_the_installed_entry_point_provides_engine_openai() -> None:
    info = next(i for i in Plugins().infos() if "engine:openai" in i.provides)
    assert (info.name, info.distribution, info.status) == ("engine_openai", "astuner-engine-openai", "ok")


def test_a_misspelled_setting_is_explained(with_openai: Plugins) -> None:
    config = load_config(
        None, ["rollout.engine=openai", "rollout.engines.openai.base_ur=http://x"], environ={}
    )
    with pytest.raises(ConfigError, match=r"'rollout\.engines\.openai\.base_ur'.*Did you mean 'base_url'"):
        build_engine(config, with_openai)
