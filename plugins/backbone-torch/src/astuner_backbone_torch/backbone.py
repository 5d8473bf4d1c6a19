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

With `trainer_common.max_staleness` N > 0 (asynchronous rollouts) the loop
is a pipeline: at the start of step s, once the weights of update s-1 are
in, the rollouts of every step up to s+N are under way; step s waits for its
own batch only, and its update runs in a worker thread while the batches
ahead keep generating from weights the update does not touch: the
transformers engine's rollout copy, which takes the new weights between
decoding batches (under the engine's lock), or a vLLM server, which gets
them as a new adapter or an in-place reload once its requests in flight
need the old ones no more (`vllm_rollout`). Each call records the version
that sampled it. A batch launched at the start of step s is
sampled by weights s-1 or newer, and used at step s+N at the latest, so
every call of the batch step s trains on is at most N updates old (checked
each step); the update corrects for it with
`algorithm.rollout_correction.rollout_is`. A checkpoint holds the task
stream's position after its own step's batch, not after the batches drawn
ahead, so a resumed run draws those again and a killed run's in-flight
rollouts are simply lost.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import set_seed

from astuner.api import AstunerError, ConfigError, SamplingParams, Task, Trajectory, get_logger
from astuner.training import (
    AdvantageReport,
    AstunerConfig,
    ChosenLoss,
    Estimator,
    ExperimentDir,
    HealthMonitor,
    MergeReport,
    MetricCatalog,
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
from astuner_backbone_torch.validation import ValidationSettings, validate
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
            own_generator=t.max_staleness > 0,
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
        steps = _Steps(
            config=config,
            experiment=experiment,
            trainer=trainer,
            stream=stream,
            estimator=estimator,
            sampling=sampling,
            validation=validation,
            val_tasks=val_tasks,
            total=total,
            metrics_log=metrics_log,
            health=health,
            catalog=catalog,
        )
        try:
            pipelined = asynchronous_engine(engine, t.max_staleness)
            async with rollout_stack(config, ctx.plugins, engine=engine, parts=parts) as runner:
                if t.val_before_train and start == 0 and val_tasks:
                    began = time.perf_counter()
                    val_metrics, _ = await validate(runner, val_tasks, validation, experiment, 0)
                    metrics_log.write(0, {**val_metrics, "timing/val_s": time.perf_counter() - began})
                    log.info("validation", step=0, **console_fields(val_metrics, catalog))
                if pipelined is not None:
                    # The batches under way overlap: they share one executor session (RolloutRunner.session).
                    async with runner.session():
                        await self._async_steps(steps, runner, pipelined, start)
                    return
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
                    await self._end_step(steps, runner, step, metrics, began, stream.state_dict())
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
                config.trainer_common.max_staleness,
            )
        else:
            engine_reg = ctx.plugins.get("engine", "transformers")
            engine_settings = plugin_settings(config, engine_reg)
            engine = TransformersEngine(policy.generator, engine_settings, adapters=policy.adapters)
            engine.tokenizer_path = resolve_model_dir(config.model.path)
        if start:
            await engine.weights_updated(start)
        return engine

    async def _end_step(
        self,
        steps: _Steps,
        runner: RolloutRunner,
        step: int,
        metrics: dict[str, float],
        began: float,
        data_state: dict[str, int],
    ) -> None:
        """After step `step`'s update: validate, save (the task stream at `data_state`), log."""
        config, experiment = steps.config, steps.experiment
        t = config.trainer_common
        ended_update = time.perf_counter()
        if steps.val_tasks and step % t.test_freq == 0:
            val_metrics, _ = await validate(runner, steps.val_tasks, steps.validation, experiment, step)
            metrics.update(val_metrics)
            metrics["timing/val_s"] = time.perf_counter() - ended_update
        if step % t.save_freq == 0 or step == steps.total:
            saving = time.perf_counter()
            save = (experiment.checkpoints, step, steps.trainer.policy, steps.trainer, data_state, config)
            if t.max_staleness > 0:
                # Rollouts are in flight: the loop must keep delivering their generations. Nothing
                # writes the policy or the optimizer until this step ends, so a thread reads them safely.
                await asyncio.to_thread(self._save, *save)
            else:
                self._save(*save)
            metrics["timing/save_s"] = time.perf_counter() - saving
        metrics["timing/step_s"] = time.perf_counter() - began
        steps.metrics_log.write(step, metrics)
        crossed = steps.health.observe(f"step {step}", metrics)
        fields = console_fields(metrics, steps.catalog, crossed, steps.health.acknowledged)
        get_logger(backbone="torch").info("step", step=step, of=steps.total, **fields)

    async def _async_steps(
        self, steps: _Steps, runner: RolloutRunner, engine: RolloutEngine, start: int
    ) -> None:
        """Steps `start + 1` to `steps.total` with rollouts up to `max_staleness` steps ahead (see the
        module docstring)."""
        config = steps.config
        bound = config.trainer_common.max_staleness
        ahead: dict[int, _Batch] = {}

        def launch(step: int) -> None:
            tasks = steps.stream.next_batch()
            run = runner.run(
                tasks,
                steps.sampling,
                config.rollout.num_repeat,
                tag=f"step{step}",
                record=steps.experiment.rollouts / f"step_{step}.jsonl",
            )
            ahead[step] = _Batch.start(run, steps.stream.state_dict())

        try:
            for step in range(start + 1, steps.total + 1):
                began = time.perf_counter()
                # The weights of update step - 1 are in: what starts now is at most `bound` stale at use.
                for upcoming in range(max(ahead, default=step - 1) + 1, min(step + bound, steps.total) + 1):
                    launch(upcoming)
                prompt_tokens = engine.prompt_tokens() if isinstance(engine, TransformersEngine) else None
                batch = ahead.pop(step)
                trajectories = await batch.task
                got = time.perf_counter()
                if isinstance(engine, VllmRollout):  # a dead server stops the run, not every rollout
                    await engine.check_alive()
                versions = call_staleness(trajectories, step - 1)
                if versions and max(versions) > bound:
                    raise AstunerError(
                        f"step {step} would train on calls {max(versions)} updates old, past "
                        f"trainer_common.max_staleness {bound}: the rollout pipeline broke its bound."
                    )
                advantages, metrics = self._samples(
                    runner, trajectories, steps.estimator, config.rollout.gamma
                )
                stale = sample_staleness(advantages.samples, trajectories, step - 1)
                update = await asyncio.to_thread(
                    steps.trainer.update, advantages.samples, sync_generator=False, staleness=stale
                )
                metrics.update({f"actor/{k}": v for k, v in update.items()})
                trained = time.perf_counter()
                if isinstance(engine, TransformersEngine):
                    await asyncio.to_thread(_swap_weights, engine, steps.trainer.policy, step)
                else:  # the server gets the weights while the batches ahead generate on it
                    await engine.weights_updated(step)
                updated = time.perf_counter()
                metrics.update(staleness_metrics(versions, bound))
                if isinstance(engine, TransformersEngine) and prompt_tokens is not None:
                    metrics["rollout/prompt_tokens_reused_frac"] = engine.prompt_reuse_since(prompt_tokens)
                metrics["timing/rollout_s"] = batch.seconds()
                metrics["timing/wait_rollout_s"] = got - began
                idle = _waited_for_weights(list(ahead.values()), got, updated)
                # Two waits for the same sync (generation idle, requests held back): the longer one is a
                # lower bound of their union, which would need both spans' ends.
                metrics["timing/wait_weights_s"] = max(idle, _held_for_weights(engine))
                metrics["timing/update_s"] = trained - got
                metrics["timing/sync_s"] = updated - trained
                await self._end_step(steps, runner, step, metrics, began, batch.position)
        finally:
            for pending in ahead.values():  # a stopped run's batches ahead are never trained on
                pending.task.cancel()
            await asyncio.gather(*(p.task for p in ahead.values()), return_exceptions=True)

    def _samples(
        self,
        runner: RolloutRunner,
        trajectories: list[Trajectory],
        estimator: Estimator,
        gamma: float,
    ) -> tuple[AdvantageReport, dict[str, float]]:
        """A step's samples with their advantages, and the metrics of the rollouts and the merge."""
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
        return advantages, metrics

    def _update(
        self,
        runner: RolloutRunner,
        trainer: PolicyTrainer,
        engine: RolloutEngine,
        trajectories: list[Trajectory],
        estimator: Estimator,
        gamma: float,
    ) -> dict[str, float]:
        """A synchronous step's update (no rollout runs meanwhile), and its metrics."""
        advantages, metrics = self._samples(runner, trajectories, estimator, gamma)
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
        data_state: dict[str, int],
        config: AstunerConfig,
    ) -> None:
        """Checkpoint step `step`; `data_state`: the task stream's position after that step's batch."""
        ensure_finite(policy.trainable_parameters(), step)
        ensure_space(root, checkpoint_size(policy))
        save_checkpoint(
            root,
            step,
            save_model=policy.save,
            tensors={**trainer.state_dict(), "rng": rng_state()},
            state={
                "data": data_state,
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


def asynchronous_engine(engine: RolloutEngine, bound: int) -> RolloutEngine | None:
    """The engine asynchronous rollouts run on with `trainer_common.max_staleness` `bound` (None for 0:
    the synchronous loop runs); an AstunerError where it is neither the in-process transformers engine
    nor a vLLM server kept in step (`VllmRollout`), rather than a silently synchronous run."""
    if not bound:
        return None
    if not isinstance(engine, TransformersEngine | VllmRollout):
        raise AstunerError(
            f"trainer_common.max_staleness is {bound}, but the rollout engine is {type(engine).__name__}: "
            "asynchronous rollouts need the in-process transformers engine, which swaps the weights "
            "between decoding batches, or the vLLM server (rollout.engine: vllm), which gets them without "
            "disturbing the requests in flight. Use one, or trainer_common.max_staleness: 0."
        )
    return engine


@dataclass
class _Steps:
    """What every step of a run uses (`TorchBackbone._end_step`, `_async_steps`)."""

    config: AstunerConfig
    experiment: ExperimentDir
    trainer: PolicyTrainer
    stream: TaskStream
    estimator: Estimator
    sampling: SamplingParams
    validation: ValidationSettings
    val_tasks: list[Task]
    total: int
    metrics_log: MetricsLog
    health: HealthMonitor
    catalog: MetricCatalog


@dataclass
class _Batch:
    """One step's rollouts under way: the task stream's position after its tasks, and when it ran."""

    task: asyncio.Task[list[Trajectory]]
    position: dict[str, int]
    began: float
    ended: float | None = None

    @classmethod
    def start(cls, run: Coroutine[Any, Any, list[Trajectory]], position: dict[str, int]) -> _Batch:
        """Schedule `run` (a `RolloutRunner.run` not awaited yet) as a task now, so its rollouts
        generate while the caller trains, and time it from now to its last trajectory (`seconds`).
        `position`: the task stream's state right after this batch's tasks were drawn, what a
        checkpoint of the batch's step stores."""
        batch = cls(asyncio.ensure_future(run), position, time.perf_counter())
        batch.task.add_done_callback(batch._end)
        return batch

    def _end(self, _: asyncio.Task[list[Trajectory]]) -> None:
        self.ended = time.perf_counter()

    def seconds(self) -> float:
        """How long its rollouts ran, launch to last trajectory."""
        return (self.ended or time.perf_counter()) - self.began


def _swap_weights(engine: TransformersEngine, policy: Policy, version: int) -> None:
    """Copy the updated policy into the rollout copy between decoding batches; later batches are
    `version` (set under the lock, so no batch records an older version for the new weights)."""
    with engine.changing_weights():
        policy.sync_generator()
        engine.policy_version = version


def _held_for_weights(engine: RolloutEngine) -> float:
    """Seconds the last sync held new requests back while those in flight ended (a vLLM server's
    reload of full weights); 0 for the transformers engine, whose swap `_waited_for_weights` covers."""
    return engine.held_seconds if isinstance(engine, VllmRollout) else 0.0


def _waited_for_weights(ahead: list[_Batch], since: float, until: float) -> float:
    """Seconds between `since` and `until` (the update and weight sync) in which every batch the
    staleness bound let start had ended: generation was idle, waiting for newer weights (0 with none
    ahead: at the last step nothing is left to generate)."""
    if not ahead or any(b.ended is None or b.ended > until for b in ahead):
        return 0.0
    idle_from = max([since, *(b.ended for b in ahead if b.ended is not None)])
    return max(0.0, until - idle_from)


def call_staleness(trajectories: list[Trajectory], current: int) -> list[int]:
    """How many updates old the weights that sampled each call were, at weights `current` (calls
    without a recorded version left out)."""
    return [
        current - call.policy_version
        for trajectory in trajectories
        for call in trajectory.calls
        if call.policy_version is not None
    ]


def sample_staleness(samples: list[Sample], trajectories: list[Trajectory], current: int) -> list[list[int]]:
    """Per sample, per token: the staleness of the call that sampled it (`call_staleness`); -1 on
    tokens no call sampled, or whose call recorded no version."""
    calls = {(t.trajectory_id, c.index): c for t in trajectories for c in t.calls}
    out = []
    for sample in samples:
        tokens = [-1] * len(sample.input_ids)
        for begin, end, index in sample.response_spans:
            version = calls[(sample.trajectory_id, index)].policy_version
            if version is not None:
                tokens[begin:end] = [current - version] * (end - begin)
        out.append(tokens)
    return out


def staleness_metrics(staleness: list[int], bound: int) -> dict[str, float]:
    """`async/staleness_mean`, `_max`, and the share of calls at each staleness 0..`bound`."""
    if not staleness:
        return {}
    metrics = {"async/staleness_mean": sum(staleness) / len(staleness), "async/staleness_max": max(staleness)}
    for k in range(bound + 1):
        metrics[f"async/calls_stale_{k}"] = staleness.count(k) / len(staleness)
    return metrics
