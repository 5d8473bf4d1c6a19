"""The astuner config as a Trinity-RFT config: one declarative table.

`RULES` maps each Trinity key (dotted) to an astuner key or a function of
the config (a computed key); the algorithms (advantage estimator, policy
loss) are the plugins' and translate through their declared Trinity
counterparts (`algorithm_keys`); `FIXED` wires Trinity to astuner's workflow.
The verbatim `trinity:` block is laid over both. The task files and the
checkpoint folder depend on the run and are added by the backbone at launch.
"""

from __future__ import annotations

from typing import Any

from astuner.training import (
    AstunerConfig,
    Plugins,
    Source,
    algorithm_counterpart,
    apply_rules,
    flatten,
    nest,
    policy_loss_settings,
    refuse_agent_adapters,
)
from astuner_backbone_trinity.settings import trinity_defaults, trinity_settings

WORKFLOW_PATH = "astuner_backbone_trinity.workflow.AstunerWorkflow"

# Trinity keeps one monitor; astuner's console logging needs none.
MONITORS = ("tensorboard", "wandb", "mlflow", "swanlab")


def _monitor(config: AstunerConfig) -> str:
    chosen = [name for name in config.trainer_common.logger if name in MONITORS]
    return chosen[0] if chosen else "tensorboard"


def _train_batch(config: AstunerConfig) -> int:
    """Experiences per update: tasks x runs per task x samples expected per run."""
    return config.data.train_batch_size * config.rollout.num_repeat * config.rollout.multi_turn.expected_steps


def _runners(config: AstunerConfig) -> int:
    """Concurrent workflow runners per inference engine."""
    return max(1, config.rollout.max_env_worker // trinity_settings(config).engine_num)


def _total_steps(config: AstunerConfig) -> int | None:
    return config.trainer_common.total_training_steps


RULES: dict[str, Source] = {
    "project": "project_name",
    "name": "experiment_name",
    "cluster.node_num": "trainer_common.nnodes",
    "cluster.gpu_per_node": "trainer_common.n_gpus_per_node",
    "model.model_path": "model.path",
    "model.max_model_len": "rollout.max_model_len",
    "model.max_prompt_tokens": "data.max_prompt_length",
    "model.max_response_tokens": "rollout.max_response_length_in_one_turn",
    "model.temperature": "rollout.temperature",
    "model.top_p": "rollout.top_p",
    "model.top_k": "rollout.top_k",
    "algorithm.repeat_times": "rollout.num_repeat",
    "algorithm.optimizer.lr": "trainer_common.optim.lr",
    "algorithm.optimizer.weight_decay": "trainer_common.optim.weight_decay",
    "buffer.batch_size": "data.train_batch_size",
    "buffer.train_batch_size": _train_batch,
    "buffer.total_epochs": "trainer_common.total_epochs",
    "buffer.total_steps": _total_steps,
    "explorer.eval_interval": "trainer_common.test_freq",
    "explorer.runner_per_model": _runners,
    "explorer.rollout_model.tensor_parallel_size": "rollout.tensor_model_parallel_size",
    "trainer.save_interval": "trainer_common.save_freq",
    "trainer.grad_clip": "trainer_common.grad_clip",
    "trainer.ulysses_sequence_parallel_size": "trainer_common.ulysses_sequence_parallel_size",
    "monitor.monitor_type": _monitor,
}

# Trinity's model wrapper must return token ids and log-probs (the astuner
# workflow drives it token-in/token-out); the workflow is found by its dotted path.
FIXED: dict[str, Any] = {
    "mode": "both",
    "model.logprobs": 1,
    "explorer.rollout_model.engine_type": "vllm",
    "buffer.explorer_input.taskset.default_workflow_type": WORKFLOW_PATH,
    "trainer.trainer_type": "verl",
}


def algorithm_keys(config: AstunerConfig, plugins: Plugins) -> dict[str, Any]:
    """Trinity's keys for the chosen advantage estimator and policy loss, from their Trinity counterparts.

    The estimator's counterpart is Trinity's `algorithm.algorithm_type`, the
    loss's its `algorithm.policy_loss_fn`, given the clip range (the user's,
    else the loss's defaults; DAPO is Trinity's ppo loss with DAPO's range)
    in `policy_loss_fn_args`, and `algorithm.loss_agg_mode`, which Trinity
    copies into those args. An algorithm without a Trinity counterpart is a
    ConfigError naming its key.
    """
    chosen = config.trainer_common.algorithm
    loss = policy_loss_settings(plugins, config.trainer_common)
    args = "algorithm.policy_loss_fn_args"
    return {
        "algorithm.algorithm_type": algorithm_counterpart(
            plugins, "advantage_estimator", chosen.adv_estimator, "trinity"
        ),
        "algorithm.policy_loss_fn": algorithm_counterpart(
            plugins, "policy_loss", chosen.policy_loss, "trinity"
        ),
        f"{args}.clip_range_low": loss.settings.clip_low,
        f"{args}.clip_range_high": loss.settings.clip_high,
        f"{args}.loss_agg_mode": loss.loss_agg_mode,
        "algorithm.loss_agg_mode": loss.loss_agg_mode,
    }


def translate(config: AstunerConfig, plugins: Plugins) -> dict[str, Any]:
    """Trinity keys (dotted) -> values: the table, the algorithms (`algorithm_keys`, among `plugins`),
    astuner's defaults (`settings`), the fixed wiring, then the `trinity:` block; a ConfigError for
    per-agent adapters, since Trinity trains one model."""
    refuse_agent_adapters(
        config.agents,
        "backbone trinity",
        "Trinity's explorer serves one model and its trainer updates it for every agent",
        "backbone torch",
        "each agent's experiences form a group of their own",
    )
    return {
        **apply_rules(config, RULES),
        **algorithm_keys(config, plugins),
        **trinity_defaults(config),
        **FIXED,
        **flatten(config.trinity),
    }


def engine_config(config: AstunerConfig, plugins: Plugins) -> dict[str, Any]:
    """The nested Trinity config (without the run's task files and folders)."""
    return nest(translate(config, plugins))
