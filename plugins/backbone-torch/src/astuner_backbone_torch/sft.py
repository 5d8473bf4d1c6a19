"""Supervised fine-tuning (`astuner sft`): a warm start for a model too small to find a behaviour by RL.

What is trained on, from `--from`:
- a demonstrations file (JSON lines of `{"messages": [...], "tools": [...]}`):
  each conversation becomes a trajectory through `astuner.core.demonstrations`,
  rendered exactly as the config's rollouts are (chat template, tool format,
  `model.tool_demonstration`);
- run records (a `rollouts/*.jsonl` file, or a run folder): the trajectories
  the judge passed (rejection-sampling fine-tuning), by default those counted
  a success, or with `torch.sft.min_reward` those rewarded at least that.

Either way the trajectories are merged into samples by the same prefix merge
as RL, so the loss covers exactly the tokens RL would train (the model's own
turns; never prompts, tool results or untrainable calls), each once. The
objective is their negative log-likelihood, token-mean over each step.
The samples go to `rollouts/sft_data.jsonl` of the run folder, so the
viewer shows what was trained; checkpoints are the torch backbone's, so a
killed run resumes (`trainer_common.resume: auto`) and RL starts from the
result with `-o model.path=<checkpoint>`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from astuner.api import AstunerError, ChatTokenizer, ConfigError, Trajectory, get_logger, load_tokenizer
from astuner.training import (
    DemonstrationError,
    ExperimentDir,
    Sample,
    append_trajectories,
    demonstration_trajectory,
    merge_trajectory,
    progress_heartbeat,
    read_demonstrations,
    read_json_lines,
    read_trajectories,
    scalar_reward,
    succeeded,
)
from astuner_backbone_torch.backbone import checkpoint_size, quiet_transformers, seed_everything
from astuner_backbone_torch.checkpoint import (
    Checkpoint,
    ensure_finite,
    ensure_space,
    prune_checkpoints,
    resume_from,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from astuner_backbone_torch.data import TaskStream
from astuner_backbone_torch.metrics import MetricsLog
from astuner_backbone_torch.models import resolve_model_dir
from astuner_backbone_torch.policy import Policy
from astuner_backbone_torch.settings import SftSettings, TorchSettings
from astuner_backbone_torch.threads import use_threads
from astuner_backbone_torch.trainer import PolicyTrainer
from astuner_backbone_torch.translate import SftRun

SFT_DATA = "sft_data.jsonl"
# How often reading a demonstrations file says how far it got.
PROGRESS_EVERY_S = 10.0


@dataclass
class SftData:
    """What `--from` gave: its kind, how many trajectories it held, how many were kept, their samples."""

    source: Path
    kind: str  # "demonstrations" or "records"
    read: int
    kept: int
    samples: list[Sample]

    @property
    def trained_tokens(self) -> int:
        return sum(s.num_trained_tokens for s in self.samples)


def passed(trajectory: Trajectory, min_reward: float | None) -> bool:
    """Whether a recorded trajectory is fine-tuned on: no error, and a success (`is_success`, else a
    positive reward) or, with `min_reward`, a reward at least that."""
    if trajectory.error is not None or trajectory.reward is None:
        return False
    if min_reward is None:
        return succeeded(trajectory)
    return (scalar_reward(trajectory) or 0.0) >= min_reward


def record_files(source: Path) -> list[Path]:
    """The rollout files of `source`: itself, or every `rollouts/*.jsonl` of a run folder."""
    if source.is_file():
        return [source]
    if (source / "rollouts").is_dir():
        return sorted((source / "rollouts").glob("*.jsonl"))
    return sorted(source.glob("*.jsonl")) if source.is_dir() else []


def source_kind(file: Path) -> str:
    """`demonstrations` or `records`, from the keys of the file's first line."""
    for _, row, _ in read_json_lines(file):
        if isinstance(row, dict) and "messages" in row:
            return "demonstrations"
        if isinstance(row, dict) and "calls" in row:
            return "records"
        break
    raise AstunerError(
        f"--from: '{file}' is neither a demonstrations file (JSON lines with 'messages') nor run records "
        "(JSON lines with 'calls', as in a run's rollouts/step_<n>.jsonl)."
    )


def load_sft_data(
    source: Path, tracker: Any, tokenizer: ChatTokenizer, sft: SftSettings, record: Path
) -> SftData:
    """Read `--from` into samples, one trajectory at a time, writing those kept to `record` as they come;
    a clear error when nothing is left to train on. `tracker`: the context tracker's settings (`SftRun`)."""
    files = record_files(source)
    if not files:
        raise AstunerError(
            f"--from: '{source}' holds no .jsonl file. Give a demonstrations file, a rollout file "
            "(rollouts/step_<n>.jsonl) or a run folder."
        )
    kind = source_kind(files[0])
    if kind == "demonstrations":
        trajectories = _demonstrations(files[0], tracker, tokenizer)
    else:
        trajectories = (t for f in files if source_kind(f) == "records" for t in read_trajectories(f))
    samples: list[Sample] = []
    read = 0

    def kept() -> Iterator[Trajectory]:
        nonlocal read
        for trajectory in trajectories:
            read += 1
            if kind == "demonstrations" or passed(trajectory, sft.min_reward):
                samples.extend(s for s in merge_trajectory(trajectory)[0] if s.num_trained_tokens)
                yield trajectory

    count = append_trajectories(record, kept())
    if not samples:
        which = "counted a success" if sft.min_reward is None else f"rewarded at least {sft.min_reward:g}"
        raise AstunerError(
            f"--from: nothing to fine-tune on in '{source}': {read} trajectories read, {count} "
            f"{which if kind == 'records' else 'usable'}, with no trainable tokens among them. "
            + ("Lower torch.sft.min_reward, or record more rollouts." if kind == "records" else "")
        )
    return SftData(source, kind, read, count, samples)


def _demonstrations(file: Path, tracker: Any, tokenizer: ChatTokenizer) -> Iterator[Trajectory]:
    log = get_logger(backbone="torch", command="sft")
    size = file.stat().st_size
    log.info(f"sft: reading demonstrations from {file} ({size / 2**20:.1f} MB)")
    said = time.monotonic()
    for count, (number, messages, tools, read) in enumerate(read_demonstrations(file), 1):
        try:
            trajectory = demonstration_trajectory(
                tokenizer, tracker, messages, tools, trajectory_id=f"demo-{number}"
            )
        except DemonstrationError as exc:
            raise AstunerError(f"--from: '{file}', line {number}: {exc}") from None
        yield trajectory
        if time.monotonic() - said >= PROGRESS_EVERY_S:
            said = time.monotonic()
            log.info(
                f"sft: {count} demonstrations read, {100 * read / max(size, 1):.0f}% of {file.name} "
                f"(line {number})"
            )


def run_sft(run: SftRun, settings: TorchSettings, source: Path, experiment: ExperimentDir) -> Path:
    """Fine-tune `model.path` on `source`; returns the last checkpoint folder."""
    log = get_logger(backbone="torch", command="sft")
    sft = settings.sft
    tokenizer = load_tokenizer(resolve_model_dir(run.model.path))
    data = load_sft_data(source, run.tracker, tokenizer, sft, experiment.rollouts / SFT_DATA)
    stream: TaskStream[Sample] = TaskStream(data.samples, sft.batch_size, run.seed)
    total = sft.epochs * stream.batches_per_epoch
    save_freq = sft.save_freq or stream.batches_per_epoch
    log.info(
        f"sft: {len(data.samples)} samples, {data.trained_tokens} trained tokens from {data.source} "
        f"({data.kind}: {data.kept} of {data.read} trajectories); {sft.epochs} epochs x "
        f"{stream.batches_per_epoch} steps of {stream.batch_size} samples, lr {sft.lr:g}"
    )
    checkpoint = resume_from(run.resume, run.experiment_root)
    seed_everything(run.seed)
    quiet_transformers()
    use_threads(settings.num_threads, "torch.num_threads")
    policy = Policy.load(
        run.model,
        settings,
        plan=run.plan,
        need_reference=False,
        weights=checkpoint.path if checkpoint else None,
        need_generator=False,  # fine-tuning generates nothing: no rollout copy, no dtype probe
    )
    trainer = PolicyTrainer(policy, run.update)
    start = _restore(checkpoint, trainer, stream, data) if checkpoint else 0
    if checkpoint is not None:
        log.info("resumed", checkpoint=str(checkpoint.path), step=start, of=total)
    metrics_log = MetricsLog(
        experiment.metrics_file,
        experiment.path / "tensorboard" if run.tensorboard else None,
    )
    last = checkpoint.path if checkpoint is not None else None
    progress = SftProgress(done=start, total=total)
    try:
        with progress_heartbeat(progress.say):
            for step in range(start + 1, total + 1):
                began = time.perf_counter()
                update = trainer.update(stream.next_batch(), objective="likelihood")
                metrics = {f"sft/{k}": v for k, v in update.items()}
                if step % save_freq == 0 or step == total:
                    last = _save(experiment, step, policy, trainer, stream, run, data)
                metrics["timing/step_s"] = time.perf_counter() - began
                metrics_log.write(step, metrics)
                progress.step_done(int(update["tokens_trained"]))
                log.info(
                    "sft step",
                    step=step,
                    of=total,
                    epoch=(step - 1) // stream.batches_per_epoch + 1,
                    nll=round(update.get("nll", 0.0), 4),
                    tokens=int(update["tokens_trained"]),
                    step_s=round(metrics["timing/step_s"], 2),
                )
    finally:
        metrics_log.close()
    if last is None:
        raise AstunerError("sft: no step ran and no checkpoint exists.")
    return last


@dataclass
class SftProgress:
    """Steps done of `total` and tokens trained since `started`: the plain line `astuner sft` logs
    every `ASTUNER_PROGRESS_EVERY_S` seconds off a terminal (`progress_heartbeat`), since a step
    on a CPU may take minutes."""

    done: int
    total: int
    tokens: int = 0
    started: float = field(default_factory=time.perf_counter)

    def step_done(self, tokens: int) -> None:
        self.done += 1
        self.tokens += tokens

    def say(self) -> None:
        elapsed = time.perf_counter() - self.started
        get_logger(backbone="torch", command="sft").info(
            "sft progress",
            step=f"{self.done}/{self.total}",
            tokens_trained=self.tokens,
            tokens_per_s=round(self.tokens / max(elapsed, 1e-9), 1),
            elapsed_s=round(elapsed, 1),
        )


def _save(
    experiment: ExperimentDir,
    step: int,
    policy: Policy,
    trainer: PolicyTrainer,
    stream: TaskStream[Sample],
    run: SftRun,
    data: SftData,
) -> Path:
    ensure_finite(policy.trainable_parameters(), step)
    ensure_space(experiment.checkpoints, checkpoint_size(policy))
    path = save_checkpoint(
        experiment.checkpoints,
        step,
        save_model=policy.save,
        tensors={**trainer.state_dict(), "rng": rng_state()},
        state={
            "kind": "sft",
            "data": stream.state_dict(),
            "model_path": run.model.path,
            "lora": policy.lora,
            "experiment": run.experiment_name,
            "source": str(data.source),
            "samples": len(data.samples),
        },
    )
    prune_checkpoints(experiment.checkpoints, run.keep_last_checkpoints)
    return path


def _restore(
    checkpoint: Checkpoint, trainer: PolicyTrainer, stream: TaskStream[Sample], data: SftData
) -> int:
    state = checkpoint.state
    if state.get("kind") != "sft" or state.get("samples") != len(data.samples):
        raise ConfigError(
            f"trainer_common.resume: checkpoint '{checkpoint.path}' is not a fine-tuning run on these "
            f"{len(data.samples)} samples (it says kind={state.get('kind', 'rl')}, samples="
            f"{state.get('samples')}, from {state.get('source')}). Resume with the same --from, or start "
            "fresh (trainer_common.resume: disable)."
        )
    tensors = checkpoint.tensors()
    trainer.load_state_dict(tensors)
    set_rng_state(tensors["rng"])
    stream.load_state_dict(state["data"])
    return checkpoint.step
