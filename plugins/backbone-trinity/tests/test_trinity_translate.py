"""The Trinity translation table (everywhere) and Trinity's own `check_and_update` (Trinity env only)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml
from astuner_backbone_trinity import plugin as trinity_plugin
from astuner_backbone_trinity.translate import WORKFLOW_PATH, engine_config, translate

from astuner.config import load_config
from astuner.errors import ConfigError
from astuner.hookspecs import hookimpl
from astuner.plugins import Plugins

MATH_AGENT = Path(__file__).parents[3] / "examples" / "math_agent" / "math_agent.yaml"
# The kernel's own plugins: the built-in estimators and losses, with their Trinity counterparts.
PLUGINS = Plugins(load_entry_points=False)


def test_math_agent_translates_with_computed_keys() -> None:
    flat = translate(load_config(MATH_AGENT, environ={}), PLUGINS)
    assert flat["model.model_path"] == "builtin:smollm2-135m-instruct"
    assert flat["algorithm.repeat_times"] == 4
    assert flat["buffer.batch_size"] == 8
    assert flat["buffer.train_batch_size"] == 8 * 4 * 1
    assert flat["explorer.runner_per_model"] == 16
    assert flat["algorithm.algorithm_type"] == "multi_step_grpo"
    assert flat["monitor.monitor_type"] == "tensorboard"
    assert flat["buffer.explorer_input.taskset.default_workflow_type"] == WORKFLOW_PATH


def test_the_trinity_block_is_laid_over_the_table(write_config) -> None:
    path = write_config(
        {"rollout": {"multi_turn": {"expected_steps": 3}}},
        trinity={"algorithm": {"algorithm_type": "grpo"}, "synchronizer.sync_interval": 2},
    )
    nested = engine_config(load_config(path, environ={}), PLUGINS)
    assert nested["algorithm"]["algorithm_type"] == "grpo"
    assert nested["synchronizer"]["sync_interval"] == 2
    assert nested["buffer"]["train_batch_size"] == 32 * 4 * 3


def test_engines_come_from_the_trinity_block_or_the_tutorials_key() -> None:
    flat = translate(load_config(MATH_AGENT, ["rollout.n_vllm_engine=4"], environ={}), PLUGINS)
    assert flat["explorer.rollout_model.engine_num"] == 4
    assert flat["explorer.runner_per_model"] == 16 // 4
    bad = load_config(MATH_AGENT, ["trinity.explorer.rollout_model.engine_num=none"], environ={})
    with pytest.raises(ConfigError, match=r"'trinity.explorer.rollout_model.engine_num': .*integer"):
        translate(bad, PLUGINS)


def test_per_agent_adapters_are_a_config_error_naming_the_key() -> None:
    config = load_config(MATH_AGENT, ["agents.wolf={}", "agents.seer.lora.rank=4"], environ={})
    with pytest.raises(ConfigError, match=r"^agents\.seer\.lora: backbone trinity .*backbone torch") as error:
        engine_config(config, PLUGINS)
    message = str(error.value)
    assert "\n" not in message and "agents.wolf" not in message
    assert "per-agent rewards" in message and "rollout.trainable_targets" in message
    targets = load_config(MATH_AGENT, ["rollout.trainable_targets=[seer]", "agents.wolf={}"], environ={})
    assert translate(targets, PLUGINS)["algorithm.repeat_times"] == 4


def test_the_algorithms_map_to_trinitys_with_the_losss_clip_range() -> None:
    flat = translate(
        load_config(MATH_AGENT, ["trainer_common.algorithm.policy_loss=dapo"], environ={}), PLUGINS
    )
    assert (flat["algorithm.algorithm_type"], flat["algorithm.policy_loss_fn"]) == ("multi_step_grpo", "ppo")
    assert flat["algorithm.policy_loss_fn_args.clip_range_low"] == 0.2
    assert flat["algorithm.policy_loss_fn_args.clip_range_high"] == 0.28
    overrides = ["trainer_common.algorithm.policy_loss=gspo", "trainer_common.clip_ratio_low=0.001"]
    flat = translate(load_config(MATH_AGENT, overrides, environ={}), PLUGINS)
    assert (
        flat["algorithm.policy_loss_fn"] == "gspo"
        and flat["algorithm.loss_agg_mode"] == "seq-mean-token-mean"
    )
    args = (
        flat["algorithm.policy_loss_fn_args.clip_range_low"],
        flat["algorithm.policy_loss_fn_args.clip_range_high"],
    )
    assert args == (0.001, 4e-4)


def test_an_algorithm_trinity_lacks_is_refused_naming_the_key_and_the_backbone() -> None:
    config = load_config(MATH_AGENT, ["trainer_common.algorithm.adv_estimator=dr_grpo"], environ={})
    with pytest.raises(
        ConfigError,
        match=r"^trainer_common\.algorithm\.adv_estimator 'dr_grpo': backbone trinity has no counterpart.*"
        r"use one of: grpo, multi_step_grpo, rloo;",
    ):
        translate(config, PLUGINS)

    class Mine:
        @hookimpl
        def register_policy_losses(self, register):
            register("mine", lambda: None, counterparts={"verl": "vanilla"})

    plugins = Plugins(load_entry_points=False)
    plugins.add(Mine(), name="mine")
    config = load_config(MATH_AGENT, ["trainer_common.algorithm.policy_loss=mine"], environ={})
    with pytest.raises(
        ConfigError,
        match=r"^trainer_common\.algorithm\.policy_loss 'mine': backbone trinity has no counterpart",
    ):
        engine_config(config, plugins)


@pytest.mark.skipif(importlib.util.find_spec("trinity") is not None, reason="Trinity is installed here")
def test_plugins_list_says_the_engine_is_missing() -> None:
    plugins = Plugins(load_entry_points=False)
    plugins.add(trinity_plugin, name="backbone_trinity")
    info = {i.name: i for i in plugins.infos()}["backbone_trinity"]
    assert info.status == "engine not installed"
    assert "astuner-backbone-trinity[engine]" in (info.error or "")


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["trainer_common.algorithm.policy_loss=gspo"],
        ["trainer_common.algorithm.policy_loss=cispo", "trainer_common.algorithm.adv_estimator=rloo"],
        ["trainer_common.algorithm.policy_loss=dapo"],
    ],
)
def test_trinity_accepts_the_math_agent_translation(tmp_path: Path, extra: list[str]) -> None:
    pytest.importorskip("trinity")
    from trinity.common.config import load_config as trinity_load

    nested = engine_config(load_config(MATH_AGENT, extra, environ={}), PLUGINS)
    nested["checkpoint_root_dir"] = str(tmp_path / "ckpt")
    nested["buffer"]["explorer_input"]["taskset"].update(
        {"name": "astuner_train", "storage_type": "file", "path": str(tmp_path / "tasks"), "split": "train"}
    )
    path = tmp_path / "trinity.yaml"
    path.write_text(yaml.safe_dump(nested), encoding="utf-8")
    cfg = trinity_load(str(path))
    cfg.check_and_update()
    assert cfg.algorithm.repeat_times == 4
    assert cfg.buffer.train_batch_size == 32
    (taskset,) = cfg.buffer.explorer_input.tasksets
    assert taskset.default_workflow_type == WORKFLOW_PATH and taskset.repeat_times == 4
    assert cfg.model.model_path == "builtin:smollm2-135m-instruct"
    algorithm = nested["algorithm"]
    assert cfg.algorithm.policy_loss_fn == algorithm["policy_loss_fn"]
    assert cfg.algorithm.policy_loss_fn_args == algorithm["policy_loss_fn_args"]
    assert cfg.algorithm.loss_agg_mode == algorithm["loss_agg_mode"]
