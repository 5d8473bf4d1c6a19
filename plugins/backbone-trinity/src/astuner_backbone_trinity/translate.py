"""The astuner config as a Trinity-RFT config: one declarative table.

`RULES` maps each Trinity key (dotted) to an astuner key or a function of
the config (a computed key); `FIXED` wires Trinity to astuner's workflow.
The verbatim `trinity:` block is laid over both. The task files and the
checkpoint folder depend on the run and are added by the backbone at launch.
"""

from __future__ import annotations

from typing import Any

from astuner.training import (
    AstunerConfig,
    Source,
    apply_rules,
    estimator_counterparts,
    flatten,
    lookup,
    nest,
    refuse_agent_adapters,
)
from astuner_backbone_trinity.settings import trinity_defaults, trinity_settings

WORKFLOW_PATH = "astuner_backbone_trinity.workflow.AstunerWorkflow"

# Trinity keeps one monitor; astuner's console logging needs none.
MONITORS = ("tensorboard", "wandb", "mlflow", "swanlab")


def _algorithm(config: AstunerConfig) -> str:
    """Trinity's algorithm type, as astuner's estimator registry declares it."""
    return lookup(
        config, "trainer_common.algorithm.adv_estimator", estimator_counterparts("trinity"), "Trinity"
    )


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
    "algorithm.algorithm_type": _algorithm,
    "algorithm.repeat_times": "rollout.num_repeat",
    "algorithm.optimizer.lr": "trainer_common.optim.lr",
    "algorithm.optimizer.weight_decay": "trainer_common.optim.weight_decay",
    "algorithm.loss_agg_mode": "trainer_common.loss_agg_mode",
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


def translate(config: AstunerConfig) -> dict[str, Any]:
    """Trinity keys (dotted) -> values: the table, astuner's defaults (`settings`), the fixed wiring,
    then the `trinity:` block; a ConfigError for per-agent adapters, since Trinity trains one model."""
    refuse_agent_adapters(
        config.agents,
        "backbone trinity",
        "Trinity's explorer serves one model and its trainer updates it for every agent",
        "backbone torch",
        "each agent's experiences form a group of their own",
    )
    return {**apply_rules(config, RULES), **trinity_defaults(config), **FIXED, **flatten(config.trinity)}


def engine_config(config: AstunerConfig) -> dict[str, Any]:
    """The nested Trinity config (without the run's task files and folders)."""
    return nest(translate(config))
