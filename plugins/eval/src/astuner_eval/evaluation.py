"""`astuner eval`: score a model on one split, through the same rollout stack as every run.

Greedy by default: one run per task at temperature 0. With `n_samples = k`
each task runs k times at the config's sampling temperature, and pass@k
(the unbiased estimator, `astuner.training.pass_at_k`) says how often at least one
of k tries succeeds. The model is the config's `model.path`, or a checkpoint
folder in its place (`astuner_eval.checkpoints`), served by whatever engine
the config picks. Agents with `agents.<name>.lora.path` (set by the config,
`-o`, or a checkpoint of per-agent adapters) generate with that adapter on
the engine `transformers`; the summary's `adapters` says which each used.

An evaluation is a run of the command `eval` (`Runs.open`: status.json,
log, companions, notifiers and closing lines as for `astuner run`), under
the experiment `<experiment>_eval` so it never mixes with the training
runs: `config.yaml` (the config's own backbone, the model actually
evaluated), `rollouts/eval.jsonl` (every trajectory as its run ends, for `astuner logview`),
`metrics.jsonl` (one row, at the checkpoint's step) and `eval_summary.json`.

What the judge (and the workflow) report in their `metrics` is averaged like
in training (`eval/judge/<name>` among the flat metrics) and grouped again
in the summary's `judge_metrics` (`{name: mean}`), so a script reads one
judge's figures without parsing keys.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import re
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from astuner.api import AstunerError, Runs, SamplingParams, Split, Task, TaskReader, Trajectory, get_logger
from astuner.training import (
    AstunerConfig,
    ExperimentDir,
    RolloutRunner,
    RunUses,
    ServesAdapters,
    append_rows,
    build,
    build_reader,
    engine_name,
    main_engine_model,
    pass_at_k,
    plugin_settings,
    rollout_metrics,
    rollout_stack,
    sampling_from_config,
    strict_json,
)
from astuner_eval.checkpoints import LATEST, agent_adapters, latest_checkpoint, model_for_checkpoint, step_of

SUMMARY_FILE = "eval_summary.json"
ROLLOUT_FILE = "eval.jsonl"
JUDGE_PREFIX = "eval/judge/"
_AGENT_JUDGE = re.compile(r"eval/agent/(?P<agent>[^/]+)/judge/(?P<metric>.+)")


@dataclasses.dataclass(frozen=True)
class EvalOptions:
    """What to evaluate and how; the command line's options."""

    split: Split = "validation"
    n_samples: int = 1
    temperature: float | None = None
    max_tasks: int | None = None
    checkpoint: Path | None = None
    companions: Mapping[str, str | None] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class EvalReport:
    """The scores, the trajectories and where they were written."""

    metrics: dict[str, float]
    trajectories: list[Trajectory]
    experiment: ExperimentDir
    summary: dict[str, Any]

    @property
    def pass_key(self) -> str:
        return f"eval/pass@{self.summary['n_samples']}"


def eval_sampling(sampling: SamplingParams, n_samples: int, temperature: float | None) -> SamplingParams:
    """The config's training `sampling`, greedy for one sample and at the config's temperature for
    several, unless `temperature` is given."""
    if temperature is None:
        temperature = 0.0 if n_samples == 1 else sampling.temperature
    return sampling.override(temperature=temperature)


def eval_metrics(trajectories: Sequence[Trajectory], n_samples: int) -> dict[str, float]:
    """`rollout_metrics` under `eval/` (judge metrics as `eval/judge/<name>`), plus
    `eval/pass@<n_samples>`."""
    metrics = rollout_metrics(trajectories, "eval")
    metrics[f"eval/pass@{n_samples}"] = pass_at_k(trajectories, n_samples)
    return metrics


def judge_means(metrics: Mapping[str, float]) -> dict[str, float]:
    """The judge metrics among `metrics`, by the name the judge gave them (`eval/judge/x` as `x`;
    a number of one agent, rolled up as `eval/agent/wolf/judge/x`, as `agent/wolf/x`)."""
    means = {}
    for key, value in metrics.items():
        if key.startswith(JUDGE_PREFIX):
            means[key.removeprefix(JUDGE_PREFIX)] = value
        elif (of_agent := _AGENT_JUDGE.fullmatch(key)) is not None:
            means[f"agent/{of_agent['agent']}/{of_agent['metric']}"] = value
    return means


def checkpoint_step(checkpoint: Path | None) -> int:
    """The training step of a `step_<n>` folder (0 for the base model or another folder)."""
    return step_of(checkpoint) or 0


def check_split(split: str) -> None:
    """Only `train` and `validation` are splits every reader has."""
    if split not in ("train", "validation"):
        raise AstunerError(f"--split must be 'train' or 'validation', not '{split}'.")


def use_checkpoint(config: AstunerConfig, checkpoint: Path, engine: str) -> None:
    """Point `config` at `checkpoint` (evaluated on the engine named `engine`): its model as
    `model.path`, or, for a checkpoint of per-agent adapters, each as `agents.<agent>.lora.path` (over
    the config's own; an agent the config does not name gets an entry) on the config's `model.path`.

    Only the engine `transformers` loads per-agent adapters: on another one the agents would run on
    the base model and the scores would not be the checkpoint's, so that is an error."""
    adapters = agent_adapters(checkpoint) if checkpoint.is_dir() else {}
    if not adapters:
        config.model.path = checkpoint_model_path(checkpoint, config.rollout.engine_url, engine)
        return
    if engine != "transformers":
        keys = ", ".join(f"agents.{agent}.lora.path" for agent in adapters)
        raise AstunerError(
            f"--checkpoint: '{checkpoint}' holds per-agent adapters ({keys}), which only the engine "
            f"transformers loads; this config uses the engine {engine}, which would run every agent "
            "on the base model. Evaluate with -o rollout.engine=transformers (and no rollout.engine_url)."
        )
    for agent, folder in adapters.items():
        entry = config.agents.get(agent)
        if entry is not None and entry.lora is not None:
            entry.lora.path = folder
        else:  # a new entry, validated as the config's own are
            block = {"agents": {agent: {"lora": {"path": folder}}}}
            config.agents[agent] = type(config).model_validate(block).agents[agent]


def checkpoint_model_path(checkpoint: Path, engine_url: str | None, engine: str) -> str:
    """`model.path` for evaluating `checkpoint`; an error when the engine (`rollout.engine_url`, or
    the engine named `engine`) serves a model of its own instead of loading `model.path`."""
    if engine_url or engine == "openai":
        where = f"rollout.engine_url ({engine_url})" if engine_url else ""
        raise AstunerError(
            f"--checkpoint needs an engine that loads model.path itself, but this config uses "
            f"{where or 'the openai engine'}, which serves its own model. Unset rollout.engine_url "
            "(-o rollout.engine_url=null) so astuner starts the engine on the checkpoint."
        )
    return model_for_checkpoint(checkpoint)


def read_tasks(reader: TaskReader, reader_name: str, options: EvalOptions) -> list[Task]:
    """The first `options.max_tasks` tasks of the evaluated split of reader `reader_name`."""
    tasks = list(itertools.islice(reader.read(options.split), options.max_tasks))
    if not tasks:
        raise AstunerError(f"The {options.split} split of reader '{reader_name}' is empty.")
    return tasks


def run_eval(config: AstunerConfig, runs: Runs, options: EvalOptions) -> EvalReport:
    """Evaluate in a run of the command `eval`: the entry that holds the whole config.

    The options are checked before the run's folder exists; `config` is
    changed to the evaluated model (`model.path`: the checkpoint, if any)
    and its own experiment (`<experiment>_eval`). The companions
    (`options.companions`) run while the evaluation does.
    """
    plugins = runs.plugins
    if options.checkpoint is not None and str(options.checkpoint) == LATEST:
        root = Path(config.experiment_dir) / config.experiment_name
        found = latest_checkpoint(
            root, plugins.registry("backbone"), lambda name: build(config, plugins, "backbone", name)
        )
        options = dataclasses.replace(options, checkpoint=found)
    check_split(options.split)
    for kind, name in (("reader", config.task_reader.type), ("judge", config.task_judge.judge_protocol)):
        plugin_settings(config, plugins.get(kind, name, config.search_paths()))
    if options.checkpoint is not None:
        use_checkpoint(config, options.checkpoint, engine_name(config, plugins))
    config.experiment_name = f"{config.experiment_name}_eval"
    sampling = eval_sampling(sampling_from_config(config.rollout), options.n_samples, options.temperature)
    uses = RunUses(splits=frozenset({options.split}))  # the evaluated split's file, not the other's
    with runs.open(config, command="eval", companions=options.companions, uses=uses) as run:
        get_logger(command="eval").info("evaluating", model=config.model.path, split=options.split)
        reader = build_reader(config, plugins)
        tasks = read_tasks(reader, config.task_reader.type, options)
        stack = rollout_stack(config, plugins, reader=reader)
        record = run.experiment.rollouts / ROLLOUT_FILE
        trajectories, served = asyncio.run(_rollouts(stack, tasks, sampling, options.n_samples, record))
        adapters = {name: path for name, path in main_engine_model(config).adapters.items() if name in served}
        about = {
            "config": str(config.source) if config.source else None,
            "model": config.model.path,
            "adapters": adapters,
        }
        return _record(trajectories, len(tasks), about, options, sampling, run.experiment)


def _record(
    trajectories: list[Trajectory],
    tasks: int,
    about: Mapping[str, object],
    options: EvalOptions,
    sampling: SamplingParams,
    experiment: ExperimentDir,
) -> EvalReport:
    """Write the metrics row and the summary (`about`: the config file, the model and the agents'
    adapters); the trajectories are in `rollouts/eval.jsonl` already, each written as its run ended."""
    metrics = eval_metrics(trajectories, options.n_samples)
    step = checkpoint_step(options.checkpoint)
    append_rows(experiment.metrics_file, [{"step": step, **metrics}])
    summary = {
        **about,
        "checkpoint": str(options.checkpoint.resolve()) if options.checkpoint else None,
        "step": step,
        "split": options.split,
        "tasks": tasks,
        "n_samples": options.n_samples,
        "temperature": sampling.temperature,
        "metrics": metrics,
        "judge_metrics": judge_means(metrics),
        "rollouts": str(experiment.rollouts / ROLLOUT_FILE),
    }
    summary_file = experiment.path / SUMMARY_FILE
    summary_file.write_text(strict_json(summary, summary_file, indent=2) + "\n", encoding="utf-8")
    get_logger(command="eval").info("eval scored", experiment=str(experiment.path), **metrics)
    return EvalReport(metrics, trajectories, experiment, summary)


async def _rollouts(
    stack: AbstractAsyncContextManager[RolloutRunner],
    tasks: list[Task],
    sampling: SamplingParams,
    n_samples: int,
    record: Path,
) -> tuple[list[Trajectory], frozenset[str]]:
    """The trajectories, and the adapters the engine served (an agent's adapter that it did not load
    is not the one its calls used: the runner warned of it)."""
    async with stack as runner:
        trajectories = await runner.run(tasks, sampling, n_samples, tag="eval", record=record)
        served = runner.engine.adapter_names if isinstance(runner.engine, ServesAdapters) else frozenset()
        return trajectories, served
