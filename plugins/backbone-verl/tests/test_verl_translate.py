"""The verl translation table, the CLI's `config show`, and `plugins list`: no verl needed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from astuner_backbone_verl import plugin as verl_plugin
from astuner_backbone_verl.backbone import VerlBackbone
from astuner_backbone_verl.translate import hydra_overrides, translate
from typer.testing import CliRunner

from astuner.cli import make_app
from astuner.config import load_config
from astuner.errors import ConfigError
from astuner.hookspecs import hookimpl
from astuner.plugins import Plugins

MATH_AGENT = Path(__file__).parents[3] / "examples" / "math_agent" / "math_agent.yaml"
# The kernel's own plugins: the built-in estimators and losses, with their verl counterparts.
PLUGINS = Plugins(load_entry_points=False)


def test_math_agent_translates_with_computed_keys() -> None:
    flat = translate(load_config(MATH_AGENT, environ={}), PLUGINS)
    assert flat["actor_rollout_ref.model.path"] == "builtin:smollm2-135m-instruct"
    assert flat["actor_rollout_ref.rollout.n"] == 4
    assert flat["data.train_batch_size"] == 8
    assert flat["actor_rollout_ref.actor.ppo_mini_batch_size"] == 8
    assert flat["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == 4096
    assert flat["actor_rollout_ref.rollout.temperature"] == 0.7
    assert flat["algorithm.adv_estimator"] == "grpo"
    assert flat["algorithm.norm_adv_by_std_in_grpo"] is True
    assert flat["trainer.project_name"] == "math_agent"
    assert flat["trainer.experiment_name"] == "math_agent"
    assert flat["trainer.logger"] == ["console", "tensorboard"]
    assert flat["actor_rollout_ref.rollout.agent.default_agent_loop"] == "astuner"


def test_verl_only_keys_have_astuner_defaults_and_the_tutorials_spelling() -> None:
    flat = translate(load_config(MATH_AGENT, environ={}), PLUGINS)
    assert flat["actor_rollout_ref.rollout.name"] == "vllm"
    assert flat["actor_rollout_ref.rollout.max_num_seqs"] == 10
    assert flat["actor_rollout_ref.actor.fsdp_config.param_offload"] is True
    assert flat["algorithm.use_kl_in_reward"] is False
    old = ["rollout.max_num_seqs=40", "trainer_common.fsdp_config.optimizer_offload=false"]
    flat = translate(load_config(MATH_AGENT, old, environ={}), PLUGINS)
    assert flat["actor_rollout_ref.rollout.max_num_seqs"] == 40
    assert flat["actor_rollout_ref.actor.fsdp_config.optimizer_offload"] is False
    bad = load_config(MATH_AGENT, ["verl.actor_rollout_ref.rollout.max_num_seqs=0"], environ={})
    with pytest.raises(ConfigError, match=r"'verl.actor_rollout_ref.rollout.max_num_seqs': .*greater than"):
        translate(bad, PLUGINS)


def test_computed_keys_follow_their_sources() -> None:
    config = load_config(
        None,
        [
            "data.train_batch_size=32",
            "trainer_common.mini_batch_num=4",
            "rollout.max_model_len=9000",
            "trainer_common.algorithm.adv_estimator=dr_grpo",
            "trainer_common.resume=/ckpt/global_step_20",
        ],
        environ={},
    )
    flat = translate(config, PLUGINS)
    assert flat["actor_rollout_ref.actor.ppo_mini_batch_size"] == 8
    assert flat["actor_rollout_ref.ref.log_prob_max_token_len_per_gpu"] == 9000
    assert (flat["algorithm.adv_estimator"], flat["algorithm.norm_adv_by_std_in_grpo"]) == ("grpo", False)
    assert (flat["trainer.resume_mode"], flat["trainer.resume_from_path"]) == (
        "resume_path",
        "/ckpt/global_step_20",
    )


def test_the_verl_block_is_laid_over_the_table(write_config) -> None:
    path = write_config(
        {"rollout": {"num_repeat": 8}},
        verl={
            "actor_rollout_ref": {"rollout": {"n": 16, "gpu_memory_utilization": 0.6}},
            "trainer.n_gpus_per_node": 4,
            "+ray_kwargs.ray_init.num_cpus": 8,
        },
    )
    flat = translate(load_config(path, environ={}), PLUGINS)
    assert flat["actor_rollout_ref.rollout.n"] == 16
    assert flat["actor_rollout_ref.rollout.gpu_memory_utilization"] == 0.6
    assert flat["trainer.n_gpus_per_node"] == 4
    assert "+ray_kwargs.ray_init.num_cpus=8" in hydra_overrides(flat)


def test_an_algorithm_verl_lacks_is_a_clear_error_naming_its_key() -> None:
    config = load_config(None, ["trainer_common.algorithm.adv_estimator=reinforce_pp_baseline"], environ={})
    with pytest.raises(
        ConfigError,
        match=r"^trainer_common\.algorithm\.adv_estimator 'reinforce_pp_baseline': backbone verl has no "
        r"counterpart.*use one of: dr_grpo, grpo, multi_step_grpo, reinforce_pp, rloo;",
    ):
        translate(config, PLUGINS)
    config = load_config(None, ["trainer_common.algorithm.adv_estimator=ppo_gae"], environ={})
    with pytest.raises(
        ConfigError, match=r"adv_estimator: 'ppo_gae' is not an installed advantage estimator"
    ):
        translate(config, PLUGINS)


def test_a_policy_loss_verl_lacks_is_refused_naming_the_key_and_the_backbone() -> None:
    class Mine:
        @hookimpl
        def register_policy_losses(self, register):
            register("mine", lambda: None, counterparts={"trinity": "ppo"})

    plugins = Plugins(load_entry_points=False)
    plugins.add(Mine(), name="mine")
    config = load_config(None, ["trainer_common.algorithm.policy_loss=mine"], environ={})
    with pytest.raises(
        ConfigError,
        match=r"^trainer_common\.algorithm\.policy_loss 'mine': backbone verl has no counterpart of this "
        r"policy loss\. On backbone verl use one of: cispo, dapo, gspo, ppo, ppo_clip, vanilla;",
    ):
        translate(config, plugins)


@pytest.mark.parametrize(
    ("loss", "overrides", "expected"),
    [
        ("ppo_clip", [], ("vanilla", 0.2, 0.2, "token-mean")),
        ("dapo", [], ("vanilla", 0.2, 0.28, "token-mean")),
        ("gspo", [], ("gspo", 3e-4, 4e-4, "seq-mean-token-mean")),
        ("cispo", ["trainer_common.clip_ratio_high=0.5"], ("cispo", 1.0, 0.5, "token-mean")),
    ],
)
def test_the_policy_loss_maps_to_verls_loss_mode_with_its_clip_range(
    loss: str, overrides: list[str], expected: tuple
) -> None:
    flat = translate(
        load_config(None, [f"trainer_common.algorithm.policy_loss={loss}", *overrides], environ={}), PLUGINS
    )
    assert (
        flat["actor_rollout_ref.actor.policy_loss.loss_mode"],
        flat["actor_rollout_ref.actor.clip_ratio_low"],
        flat["actor_rollout_ref.actor.clip_ratio_high"],
        flat["actor_rollout_ref.actor.loss_agg_mode"],
    ) == expected


def test_per_agent_adapters_are_a_config_error_and_the_rest_of_multi_agent_training_translates() -> None:
    config = load_config(MATH_AGENT, ["agents.wolf.lora.rank=4", "agents.seer={}"], environ={})
    with pytest.raises(ConfigError, match=r"agents\.wolf\.lora: backbone verl .*backbone torch") as error:
        VerlBackbone().engine_config(config, PLUGINS)
    message = str(error.value)
    assert "\n" not in message and "agents.seer" not in message
    assert "per-agent rewards" in message and "rollout.trainable_targets" in message
    targets = load_config(MATH_AGENT, ["rollout.trainable_targets=[wolf]", "agents.seer={}"], environ={})
    assert translate(targets, PLUGINS)["actor_rollout_ref.rollout.n"] == 4


def test_hydra_values_are_quoted_for_the_command_line() -> None:
    overrides = hydra_overrides(
        {"a.s": "Qwen/Qwen2.5-7B", "a.l": ["console", "wandb"], "a.n": None, "a.b": False, "a.f": 1e-6}
    )
    assert overrides == [
        "a.s='Qwen/Qwen2.5-7B'",
        "a.l=['console','wandb']",
        "a.n=null",
        "a.b=false",
        "a.f=1e-06",
    ]


def test_config_show_prints_the_translated_config() -> None:
    plugins = Plugins()
    if "verl" not in plugins.registry("backbone"):
        plugins.add(verl_plugin, name="backbone_verl")
    result = CliRunner().invoke(
        make_app(plugins), ["config", "show", "--conf", str(MATH_AGENT), "--backbone", "verl"]
    )
    assert result.exit_code == 0, result.output
    engine_part = result.output.split("# engine config for backbone 'verl'\n", 1)[1]
    shown = yaml.safe_load(engine_part)
    assert shown == VerlBackbone().engine_config(load_config(MATH_AGENT, environ={}), plugins)
    assert shown["actor_rollout_ref"]["rollout"]["agent"]["default_agent_loop"] == "astuner"


@pytest.mark.skipif(importlib.util.find_spec("verl") is not None, reason="verl is installed here")
def test_plugins_list_says_the_engine_is_missing() -> None:
    plugins = Plugins(load_entry_points=False)
    plugins.add(verl_plugin, name="backbone_verl")
    info = {i.name: i for i in plugins.infos()}["backbone_verl"]
    assert info.status == "engine not installed"
    assert "pip install 'astuner-backbone-verl[engine]'" in (info.error or "")
    assert info.provides == ["backbone:verl"]
    result = CliRunner().invoke(make_app(plugins), ["plugins", "list", "--json"])
    listed = {entry["name"]: entry for entry in json.loads(result.output)}["backbone_verl"]
    assert listed["status"] == "engine not installed"
    assert "astuner-backbone-verl[engine]" in listed["error"]
