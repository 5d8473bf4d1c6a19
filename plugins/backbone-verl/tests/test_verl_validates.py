"""verl's own Hydra composition and `validate_config` accept the translated config (verl env only)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verl")

from astuner_backbone_verl.translate import hydra_overrides, translate
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from astuner.config import load_config
from astuner.plugins import Plugins

MATH_AGENT = Path(__file__).parents[3] / "examples" / "math_agent" / "math_agent.yaml"
PLUGINS = Plugins(load_entry_points=False)


def _compose_and_validate(overrides: list[str]):
    import verl
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    return cfg


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["trainer_common.algorithm.adv_estimator=rloo", "trainer_common.use_kl_loss=false"],
        ["trainer_common.algorithm.policy_loss=gspo"],
        ["trainer_common.algorithm.policy_loss=cispo", "trainer_common.algorithm.adv_estimator=dr_grpo"],
        ["trainer_common.algorithm.policy_loss=dapo"],
    ],
)
def test_verl_accepts_the_math_agent_translation(extra: list[str]) -> None:
    flat = translate(load_config(MATH_AGENT, extra, environ={}), PLUGINS)
    flat.update({"data.train_files": "/data/train.parquet", "data.val_files": "/data/val.parquet"})
    cfg = _compose_and_validate(hydra_overrides(flat))
    assert cfg.actor_rollout_ref.rollout.n == 4
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "astuner"
    assert cfg.actor_rollout_ref.model.path == "builtin:smollm2-135m-instruct"
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 8
    assert list(cfg.trainer.logger) == ["console", "tensorboard"]
    # every translated key names a key of verl's schema: compose would reject it otherwise
    assert cfg.algorithm.adv_estimator == flat["algorithm.adv_estimator"]
    policy_loss = cfg.actor_rollout_ref.actor.policy_loss
    assert policy_loss.loss_mode == flat["actor_rollout_ref.actor.policy_loss.loss_mode"]
    assert cfg.actor_rollout_ref.actor.clip_ratio_high == flat["actor_rollout_ref.actor.clip_ratio_high"]


def test_verl_rejects_what_its_validator_rejects() -> None:
    """The check can fail: 4 tasks x 4 runs do not split over 3 GPUs without dynamic batching."""
    flat = translate(load_config(MATH_AGENT, ["data.train_batch_size=4"], environ={}), PLUGINS)
    flat["actor_rollout_ref.actor.use_dynamic_bsz"] = False
    flat["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] = 1
    flat["trainer.n_gpus_per_node"] = 3
    flat.update({"data.train_files": "/d/t.parquet", "data.val_files": "/d/v.parquet"})
    with pytest.raises(AssertionError, match="must be divisible"):
        _compose_and_validate(hydra_overrides(flat))


def test_a_misspelled_verl_key_in_the_passthrough_is_refused_by_verl(write_config) -> None:
    from hydra.errors import ConfigCompositionException

    path = write_config({}, verl={"trainer": {"n_gpu_per_node": 2}})
    flat = translate(load_config(path, environ={}), PLUGINS)
    with pytest.raises(ConfigCompositionException):
        _compose_and_validate(hydra_overrides(flat))
