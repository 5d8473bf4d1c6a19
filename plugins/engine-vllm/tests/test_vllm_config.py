"""Configs that name engine `vllm` reach this plugin: `rollout.engine`, `auto` with a URL, settings blocks."""

from __future__ import annotations

import asyncio
import importlib.util
import textwrap
from pathlib import Path

import astuner_engine_vllm.engine as vllm_plugin
import pytest
from astuner_engine_vllm import VllmEngine
from vllm_stub import END, make_app

from astuner.api import ConfigError, SamplingParams
from astuner.components import build_engine
from astuner.serving import ThreadedServer
from astuner.training import Plugins, check_plugin_blocks, load_config


@pytest.fixture
def with_vllm(plugins: Plugins) -> Plugins:
    plugins.add(vllm_plugin, name="engine_vllm")
    return plugins


@pytest.mark.parametrize("engine", ["vllm", "auto"])
def test_a_config_naming_vllm_or_a_url_builds_this_engine(with_vllm: Plugins, engine: str) -> None:
    with ThreadedServer(make_app()) as server:
        overrides = [f"rollout.engine={engine}", f"rollout.engine_url={server.url}/v1"]
        config = load_config(None, [*overrides, "rollout.engines.vllm.request_timeout=30"], environ={})
        built = build_engine(config, with_vllm)

        async def go():
            try:
                return await built.generate([5, 6, 7], SamplingParams(max_tokens=8))
            finally:
                await built.aclose()

        assert isinstance(built, VllmEngine) and built.settings.request_timeout == 30
        assert asyncio.run(go()).token_ids == [7, 6, 5, END]


def test_the_installed_entry_point_provides_engine_vllm() -> None:
    info = next(i for i in Plugins().infos() if "engine:vllm" in i.provides)
    ready = "ok" if importlib.util.find_spec("vllm") is not None else "vllm not installed"
    assert (info.name, info.distribution, info.status) == ("engine_vllm", "astuner-engine-vllm", ready)


def test_a_misspelled_setting_is_explained(with_vllm: Plugins, tmp_path: Path) -> None:
    conf = tmp_path / "conf.yaml"
    conf.write_text(
        textwrap.dedent(
            """
            astuner:
              auxiliary_models:
                critic:
                  path: m
                  engine_url: http://127.0.0.1:9
                  engines: {vllm: {ur: http://x}}
            """
        )
    )
    config = load_config(conf, environ={})
    with pytest.raises(
        ConfigError, match=r"'auxiliary_models\.critic\.engines\.vllm\.ur'.*Did you mean 'url'"
    ):
        check_plugin_blocks(config, with_vllm)
