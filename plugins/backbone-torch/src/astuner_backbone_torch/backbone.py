"""Backbone `torch`: GRPO on one machine, the policy generating its own rollouts in-process.

Each step: take `data.train_batch_size` tasks, run each `rollout.num_repeat`
times through the rollout runner (the engine is the policy's rollout copy),
merge each trajectory's calls into samples, compute advantages per group,
update the policy, then validate / checkpoint / log as configured. The
experiment folder gets `rollouts/step_<n>.jsonl`, `metrics.jsonl`,
`tensorboard/` and `checkpoints/step_<n>/`.

With per-agent adapters (`agents.<name>.lora`) the policy holds one adapter
per agent, the engine routes each agent's calls to its adapter, and each
trained adapter learns from its own agent's samples (see `adapters`).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from transformers import set_seed

from astuner.api import AstunerError, ConfigError, Task, Trajectory, get_logger
from astuner.training import (
    AstunerConfig,
    ChosenLoss,
    Estimator,
    HealthMonitor,
    MergeReport,
    Plugins,
    RolloutParts,
    RolloutRunner,
    RunContext,
    RunUses,
    Sample,
    advantage_estimator,
    build_reader,
    compute_advantages,
    console_fields,
    main_engine_model,
    merge_trajectory,
    metric_catalog,
    plugin_settings,
    policy_loss,
    refuse_agent_adapters,
    rollout_stack,
    sampling_from_config,
)
from astuner_backbone_torch.checkpoint import (
    Checkpoint,
    checkpoint_bytes,
    ensure_finite,
    ensure_space,
    latest_checkpoint,
    prune_checkpoints,
    resume_from,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from astuner_backbone_torch.data import TaskStream
from astuner_backbone_torch.engine import TransformersEngine, quiet_transformers
from astuner_backbone_torch.metrics import MetricsLog, rollout_metrics
from astuner_backbone_torch.models import resolve_model_dir
from astuner_backbone_torch.policy import Policy
from astuner_backbone_torch.settings import TorchSettings
from astuner_backbone_torch.threads import use_threads
from astuner_backbone_torch.trainer import PolicyTrainer
from astuner_backbone_torch.translate import experiment_root, update_settings, validation_settings
from astuner_backbone_torch.validation import validate
from astuner_backbone_torch.vllm_rollout import VllmRollout

# What backbone `torch` can roll out on (`rollout.engine`); auto is the in-process policy.
ROLLOUT_ENGINES = ("auto", "transformers", "vllm")
RolloutEngine = TransformersEngine | VllmRollout


def chosen_estimator(config: AstunerConfig, plugins: Plugins) -> Estimator:
    """The estimator `trainer_common.algorithm.adv_estimator` names among the plugins' (aliases resolved);
    a ConfigError naming the key and the installed ones if none."""
    return advantage_estimator(plugins, config.trainer_common.algorithm.adv_estimator)


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's generators; folded into 32 bits, the most numpy takes."""
    set_seed(seed % 2**32)


def make_samples(
    trajectories: list[Trajectory], trainable_targets: list[str] | None
) -> tuple[list[Sample], MergeReport]:
    """Merge every trajectory that did not fail into samples, in trajectory order."""
    samples: list[Sample] = []
    report = MergeReport()
    for trajectory in trajectories:
        merged, part = merge_trajectory(trajectory, trainable_targets=trainable_targets)
        samples.extend(merged)
        report = report + part
    return samples, report


class TorchBackbone:
    """The `torch` backbone; built with the validated `torch:` block."""

    def __init__(self, settings: TorchSettings | None = None) -> None:
        self.settings = settings or TorchSettings()

    def run(self, ctx: RunContext) -> None:
        asyncio.run(self.train(ctx))

    def latest_checkpoint(self, runs: Iterable[Path]) -> Path | None:
        """The highest-step complete `checkpoints/step_<n>/` of `runs` (the `FindsCheckpoints` protocol)."""
        found = latest_checkpoint(runs)
        return found.path if found is not None else None

    def run_uses(self, config: AstunerConfig) -> RunUses:
        """The train split, the validation split when the run may validate, and `model.path` loaded here
        whatever the rollout engine (the `DeclaresRunUses` protocol).

        It validates before training (`val_before_train`) or every `test_freq`
        steps; with `total_training_steps` unset the step count depends on
        the data, so it may.
        """
        t = config.trainer_common
        steps = t.total_training_steps
        validates = t.val_before_train or steps is None or t.test_freq <= steps
        return RunUses(splits=frozenset({"train", "validation"} if validates else {"train"}), model="here")

    async def train(self, ctx: RunContext) -> None:
        config, settings = ctx.config, self.settings
        if config.rollout.engine not in ROLLOUT_ENGINES:
            raise ConfigError(
                f"rollout.engine is '{config.rollout.engine}', but backbone 'torch' rolls out with the "
                "policy it trains, in this process (auto, transformers) or on a vLLM server it keeps in "
                "step with the policy (vllm). Set rollout.engine to one of those, or pick a backbone "
                "that runs other engines (verl, trinity)."
            )
        on_vllm = config.rollout.engine == "vllm"
        if on_vllm:
            refuse_agent_adapters(
                config.agents,
                "backbone torch on vLLM",
                "it serves adapters only from the policy it trains, in this process",
                "rollout.engine: transformers (or auto)",
                "each agent's calls form a group of their own",
            )
        # The algorithm is checked before anything loads: a misspelt name fails in a second.
        estimator = chosen_estimator(config, ctx.plugins)
        loss = policy_loss(ctx.plugins, config.trainer_common)
        quiet_transformers()
        use_threads(settings.num_threads, "torch.num_threads")
        reader = build_reader(config, ctx.plugins)
        # The workflow loads before the model: its trainable_targets decide which adapters train.
        parts = RolloutParts.build(config, ctx.plugins, reader)
        try:
            await self._train(ctx, reader, parts, estimator, loss, on_vllm)
        finally:
            await parts.aclose()

    async def _train(
        self,
        ctx: RunContext,
        reader: Any,
        parts: RolloutParts,
        estimator: Estimator,
        loss: ChosenLoss,
        on_vllm: bool,
    ) -> None:
        """The run itself, on the workflow, judge and checks of `parts`."""
        config, experiment, settings = ctx.config, ctx.experiment, self.settings
        t = config.trainer_common
        log = get_logger(backbone="torch")
        plan = parts.agents
        train_tasks = _tasks(reader.read("train"), "train", config.task_reader.type)
        stream = TaskStream(train_tasks, config.data.train_batch_size, t.seed)
        total = t.total_training_steps or t.total_epochs * stream.batches_per_epoch
        # The validation split is read only when validation runs: a reader may have none.
        validates = t.val_before_train or t.test_freq <= total
        val_tasks = (
            list(itertools.islice(reader.read("validation"), settings.val_max_tasks)) if validates else []
        )

        checkpoint = resume_from(t.resume, experiment_root(config))
        seed_everything(t.seed)
        use_kl = t.use_kl_loss and t.kl_loss_coef > 0
        policy = Policy.load(
            config.model,
            settings,
            plan=plan,
            need_reference=use_kl,
            weights=checkpoint.path if checkpoint else None,
            need_generator=not on_vllm,
        )
        trainer = PolicyTrainer(policy, update_settings(config, settings, loss))
        if t.save_freq <= total:  # before any work: the disk must hold at least one checkpoint
            ensure_space(experiment.checkpoints, checkpoint_size(policy))
        start = 0
        if checkpoint is not None:
            start = self._restore(checkpoint, trainer, stream)
            log.info("resumed", checkpoint=str(checkpoint.path), step=start)
        engine = await self._rollout_engine(ctx, policy, start)
        tensorboard = experiment.path / "tensorboard" if "tensorboard" in t.logger else None
        catalog = metric_catalog(ctx.plugins)
        metrics_log = MetricsLog(experiment.metrics_file, tensorboard, catalog)
        sampling = sampling_from_config(config.rollout)
        validation = validation_settings(config)
        health = HealthMonitor(catalog, acknowledged=frozenset(config.health.acknowledged))
        try:
            async with rollout_stack(config, ctx.plugins, engine=engine, parts=parts) as runner:
                if t.val_before_train and start == 0 and val_tasks:
                    began = time.perf_counter()
                    val_metrics, _ = await validate(runner, val_tasks, validation, experiment, 0)
                    metrics_log.write(0, {**val_metrics, "timing/val_s": time.perf_counter() - began})
                    log.info("validation", step=0, **console_fields(val_metrics, catalog))
                for step in range(start + 1, total + 1):
                    began = time.perf_counter()
                    tasks = stream.next_batch()
                    in_process = isinstance(engine, TransformersEngine)
                    prompt_tokens = engine.prompt_tokens() if in_process else (0, 0)
                    trajectories = await runner.run(
                        tasks,
                        sampling,
                        config.rollout.num_repeat,
                        tag=f"step{step}",
                        record=experiment.rollouts / f"step_{step}.jsonl",
                    )
                    rolled = time.perf_counter()
                    if isinstance(engine, VllmRollout):  # a dead server stops the run, not every rollout
                        await engine.check_alive()
                    metrics = self._update(
                        runner, trainer, engine, trajectories, estimator, config.rollout.gamma
                    )
                    if in_process:
                        reuse = engine.prompt_reuse_since(prompt_tokens)
                        metrics["rollout/prompt_tokens_reused_frac"] = reuse
                    trained = time.perf_counter()
                    await engine.weights_updated(step)
                    updated = time.perf_counter()
                    metrics["timing/rollout_s"] = rolled - began
                    metrics["timing/update_s"] = trained - rolled
                    metrics["timing/sync_s"] = updated - trained
                    if val_tasks and step % t.test_freq == 0:
                        val_metrics, _ = await validate(runner, val_tasks, validation, experiment, step)
                        metrics.update(val_metrics)
                        metrics["timing/val_s"] = time.perf_counter() - updated
                    if step % t.save_freq == 0 or step == total:
                        saving = time.perf_counter()
                        self._save(experiment.checkpoints, step, policy, trainer, stream, config)
                        metrics["timing/save_s"] = time.perf_counter() - saving
                    metrics["timing/step_s"] = time.perf_counter() - began
                    metrics_log.write(step, metrics)
                    crossed = health.observe(f"step {step}", metrics)
                    fields = console_fields(metrics, catalog, crossed, health.acknowledged)
                    log.info("step", step=step, of=total, **fields)
        finally:
            metrics_log.close()
            await engine.aclose()

    async def _rollout_engine(self, ctx: RunContext, policy: Policy, start: int) -> RolloutEngine:
        """The engine rollouts run on, serving the weights of update `start` (0: the initial ones)."""
        config = ctx.config
        if config.rollout.engine == "vllm":
            engine_settings = plugin_settings(config, ctx.plugins.get("engine", "vllm"))
            engine: RolloutEngine = VllmRollout.start(
                ctx.plugins,
                engine_settings,
                main_engine_model(config),
                config.model.lora.rank,
                policy,
                ctx.experiment.path,
            )
        else:
            engine_reg = ctx.plugins.get("engine", "transformers")
            engine_settings = plugin_settings(config, engine_reg)
            engine = TransformersEngine(policy.generator, engine_settings, adapters=policy.adapters)
            engine.tokenizer_path = resolve_model_dir(config.model.path)
        if start:
            await engine.weights_updated(start)
        return engine

    def _update(
        self,
        runner: RolloutRunner,
        trainer: PolicyTrainer,
        engine: RolloutEngine,
        trajectories: list[Trajectory],
        estimator: Estimator,
        gamma: float,
    ) -> dict[str, float]:
        targets = runner.trainable_targets or None
        samples, report = make_samples(trajectories, targets)
        advantages = compute_advantages(trajectories, samples, estimator=estimator, gamma=gamma)
        metrics: dict[str, float] = rollout_metrics(trajectories, "train")
        metrics.update(
            {
                "train/zero_adv_group_frac": len(advantages.zero_variance_groups) / (advantages.groups or 1),
                "train/samples": len(advantages.samples),
                "train/calls_merged": report.calls,
                "train/merge_ratio": report.reduction,
                "train/samples_per_episode": report.samples_per_episode,
                "train/trained_tokens": report.generated_tokens,
                "train/drifts": report.drifts,
                "train/prefix_breaks": len(report.breaks),
                **{f"train/prefix_breaks/{r}": n for r, n in report.breaks_by_reason().items()},
            }
        )
        # No batch may be generated while the weights change.
        with engine.changing_weights():
            update = trainer.update(advantages.samples)
        metrics.update({f"actor/{k}": v for k, v in update.items()})
        return metrics

    def _save(
        self,
        root: Any,
        step: int,
        policy: Policy,
        trainer: PolicyTrainer,
        stream: TaskStream,
        config: AstunerConfig,
    ) -> None:
        ensure_finite(policy.trainable_parameters(), step)
        ensure_space(root, checkpoint_size(policy))
        save_checkpoint(
            root,
            step,
            save_model=policy.save,
            tensors={**trainer.state_dict(), "rng": rng_state()},
            state={
                "data": stream.state_dict(),
                "model_path": config.model.path,
                "lora": policy.lora,
                "adapters": list(policy.trained),
                "experiment": config.experiment_name,
            },
        )
        prune_checkpoints(root, config.trainer_common.keep_last_checkpoints)

    def _restore(self, checkpoint: Checkpoint, trainer: PolicyTrainer, stream: TaskStream) -> int:
        if checkpoint.state.get("lora") != trainer.policy.lora:
            raise ConfigError(
                f"trainer_common.resume: checkpoint '{checkpoint.path}' was trained "
                f"{'with' if checkpoint.state.get('lora') else 'without'} LoRA, but model.lora.rank "
                "now says otherwise. Resume with the same model.lora settings, or start fresh "
                "(trainer_common.resume: disable)."
            )
        tensors = checkpoint.tensors()
        trainer.load_state_dict(tensors)
        set_rng_state(tensors["rng"])
        stream.load_state_dict(checkpoint.state["data"])
        return checkpoint.step


def _tasks(tasks: Any, split: str, reader: str) -> list[Task]:
    out = list(tasks)
    if not out:
        raise AstunerError(f"The {split} split of reader '{reader}' is empty: nothing to train on.")
    return out


def checkpoint_size(policy: Policy) -> int:
    """One checkpoint of this policy: the adapter alone with LoRA, else every weight."""
    trainable = list(policy.trainable_parameters())
    weights = trainable if policy.lora else list(policy.model.state_dict().values())
    return checkpoint_bytes(weights, trainable)
