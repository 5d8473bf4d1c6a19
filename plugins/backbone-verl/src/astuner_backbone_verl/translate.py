"""The astuner config as verl's Hydra config: one declarative table.

`RULES` maps each verl key (dotted, as on verl's command line) to where its
value comes from: an astuner key (dotted) or a function of the whole config
(a computed key). The algorithms (advantage estimator, policy loss) are the
plugins' and translate through their declared verl counterparts
(`algorithm_keys`); the clip range and loss aggregation default to the
chosen loss's. The keys only verl reads have astuner's defaults in
`settings`. `FIXED` holds what wires verl to astuner whatever the config
says. The verbatim `verl:` block is laid over all, so a user can set any
verl key, or override a translated one. Keys that depend on the run
(data files, checkpoint folder) are added by the backbone at launch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from astuner.training import (
    AstunerConfig,
    Plugins,
    Source,
    algorithm_counterpart,
    apply_rules,
    flatten,
    policy_loss_settings,
    refuse_agent_adapters,
)
from astuner_backbone_verl.settings import verl_defaults

AGENT_LOOP_NAME = "astuner"


def _mini_batch(config: AstunerConfig) -> int:
    """verl counts its PPO mini-batch in prompts (it multiplies by rollout.n itself)."""
    return max(1, config.data.train_batch_size // config.trainer_common.mini_batch_num)


def _token_budget(config: AstunerConfig) -> int:
    """A micro-batch must hold at least one whole sequence."""
    return max(config.trainer_common.max_token_len_per_gpu, config.rollout.max_model_len)


def _resume_mode(config: AstunerConfig) -> str:
    resume = config.trainer_common.resume
    return resume if resume in ("disable", "auto") else "resume_path"


def _resume_path(config: AstunerConfig) -> str | None:
    resume = config.trainer_common.resume
    return None if resume in ("disable", "auto") else resume


ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
REF = "actor_rollout_ref.ref"

RULES: dict[str, Source] = {
    "trainer.project_name": "project_name",
    "trainer.experiment_name": "experiment_name",
    "trainer.nnodes": "trainer_common.nnodes",
    "trainer.n_gpus_per_node": "trainer_common.n_gpus_per_node",
    "trainer.total_epochs": "trainer_common.total_epochs",
    "trainer.total_training_steps": "trainer_common.total_training_steps",
    "trainer.save_freq": "trainer_common.save_freq",
    "trainer.test_freq": "trainer_common.test_freq",
    "trainer.val_before_train": "trainer_common.val_before_train",
    "trainer.logger": "trainer_common.logger",
    "trainer.resume_mode": _resume_mode,
    "trainer.resume_from_path": _resume_path,
    "data.train_batch_size": "data.train_batch_size",
    "data.max_prompt_length": "data.max_prompt_length",
    "data.max_response_length": "data.max_response_length",
    "data.seed": "trainer_common.seed",
    "actor_rollout_ref.model.path": "model.path",
    f"{ACTOR}.optim.lr": "trainer_common.optim.lr",
    f"{ACTOR}.optim.weight_decay": "trainer_common.optim.weight_decay",
    f"{ACTOR}.optim.lr_warmup_steps": "trainer_common.optim.lr_warmup_steps",
    f"{ACTOR}.ppo_mini_batch_size": _mini_batch,
    f"{ACTOR}.use_dynamic_bsz": lambda c: True,
    f"{ACTOR}.ppo_max_token_len_per_gpu": _token_budget,
    f"{ACTOR}.use_kl_loss": "trainer_common.use_kl_loss",
    f"{ACTOR}.kl_loss_coef": "trainer_common.kl_loss_coef",
    f"{ACTOR}.kl_loss_type": "trainer_common.kl_loss_type",
    f"{ACTOR}.grad_clip": "trainer_common.grad_clip",
    f"{ACTOR}.ulysses_sequence_parallel_size": "trainer_common.ulysses_sequence_parallel_size",
    f"{REF}.log_prob_use_dynamic_bsz": lambda c: True,
    f"{REF}.log_prob_max_token_len_per_gpu": _token_budget,
    f"{ROLLOUT}.n": "rollout.num_repeat",
    f"{ROLLOUT}.temperature": "rollout.temperature",
    f"{ROLLOUT}.top_p": "rollout.top_p",
    f"{ROLLOUT}.top_k": "rollout.top_k",
    f"{ROLLOUT}.max_model_len": "rollout.max_model_len",
    f"{ROLLOUT}.tensor_model_parallel_size": "rollout.tensor_model_parallel_size",
    f"{ROLLOUT}.log_prob_use_dynamic_bsz": lambda c: True,
    f"{ROLLOUT}.log_prob_max_token_len_per_gpu": _token_budget,
    f"{ROLLOUT}.val_kwargs.temperature": "rollout.val_kwargs.temperature",
    f"{ROLLOUT}.val_kwargs.top_p": "rollout.val_kwargs.top_p",
    f"{ROLLOUT}.val_kwargs.top_k": "rollout.val_kwargs.top_k",
    f"{ROLLOUT}.val_kwargs.do_sample": "rollout.val_kwargs.do_sample",
    f"{ROLLOUT}.val_kwargs.n": "trainer_common.val_pass_n",
}

# The agent loop reads each task from the row's extra_info and needs the chat
# form of the prompt; the reward is the judge's, set by the agent loop.
FIXED: dict[str, Any] = {
    f"{ROLLOUT}.agent.default_agent_loop": AGENT_LOOP_NAME,
    "data.return_raw_chat": True,
}


def algorithm_keys(config: AstunerConfig, plugins: Plugins) -> dict[str, Any]:
    """verl's keys for the chosen advantage estimator and policy loss, from their verl counterparts.

    The estimator's counterpart is verl's `(adv_estimator,
    norm_adv_by_std_in_grpo)`, the loss's its `policy_loss.loss_mode`; the
    clip range and `loss_agg_mode` are the user's, else the loss's defaults
    (DAPO is verl's vanilla loss with DAPO's clip range). An algorithm
    without a verl counterpart is a ConfigError naming its key.
    """
    chosen = config.trainer_common.algorithm
    adv_estimator, norm_by_std = algorithm_counterpart(
        plugins, "advantage_estimator", chosen.adv_estimator, "verl"
    )
    loss_mode = algorithm_counterpart(plugins, "policy_loss", chosen.policy_loss, "verl")
    loss = policy_loss_settings(plugins, config.trainer_common)
    return {
        "algorithm.adv_estimator": adv_estimator,
        "algorithm.norm_adv_by_std_in_grpo": norm_by_std,
        f"{ACTOR}.policy_loss.loss_mode": loss_mode,
        f"{ACTOR}.clip_ratio_low": loss.settings.clip_low,
        f"{ACTOR}.clip_ratio_high": loss.settings.clip_high,
        f"{ACTOR}.loss_agg_mode": loss.loss_agg_mode,
    }


def translate(config: AstunerConfig, plugins: Plugins) -> dict[str, Any]:
    """verl keys (dotted) -> values: the table, the algorithms (`algorithm_keys`, among `plugins`),
    astuner's defaults of verl-only keys, the fixed wiring, then the `verl:` block; a ConfigError for
    per-agent adapters, since verl trains one policy."""
    refuse_agent_adapters(
        config.agents,
        "backbone verl",
        "verl updates one policy that every agent generates with",
        "backbone torch",
        "each verl group (one prompt's runs) trains one agent, picked among the trainable agents the judge "
        "scored",
    )
    return {
        **apply_rules(config, RULES),
        **algorithm_keys(config, plugins),
        **verl_defaults(config),
        **FIXED,
        **flatten(config.verl),
    }


def hydra_overrides(flat: Mapping[str, Any]) -> list[str]:
    """Command-line overrides for `python -m verl.trainer.main_ppo`.

    Values are written in Hydra's grammar: strings quoted, lists in brackets,
    None as null. A key the user wrote with a leading `+` (not in verl's
    schema) keeps it.
    """
    return [f"{key}={_hydra_value(value)}" for key, value in flat.items()]


def _hydra_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{_hydra_value(v)}" for k, v in value.items()) + "}"
    escaped = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"
