"""The Trinity workflow `AstunerWorkflow`: one astuner workflow run per Trinity run.

Trinity's explorer reads a task row, builds its `Task` with the workflow
class the translated config names (`default_workflow_type`), instantiates it
with `task.to_workflow(model_wrapper)` for every run and awaits
`run_async()`. This class reads the astuner task from the row's
`astuner_task`, runs the user's workflow, judge and madness checks with a
`ModelTuner` whose engine is Trinity's model wrapper (token ids in, token
ids and log-probs out), merges the recorded calls and returns one Trinity
`Experience` per merged sample, each with the run's astuner reward.

Per-agent rewards (a judge's `JudgeOutput(reward={agent: value})`): each
experience gets its own agent's reward, and its `eid.task` becomes
`<task>/<agent>`. Trinity groups the runs of a task by that id (`eid.tid`:
multi_step_grpo and grpo group by it, rloo through the `uid` it becomes),
so one agent's experiences across the task's runs form a group, with a
baseline of that agent's rewards alone.

A run whose workflow raised is reported to Trinity by raising, as Trinity
expects of a failed run: its runner records the error and trains on none
of it.

One temperature: Trinity's trainer recomputes every log-prob at
`model.temperature`, so in a training task a call the workflow sampled at
another (a per-call override) gets action mask 0: it stays in the
experience but is not trained. Each experience counts such calls in its
metric `astuner/untrained_calls:sum` (the step's
`rollout/astuner/untrained_calls/sum`), and the runner process warns once.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from trinity.common.experience import Experience
from trinity.common.workflows.workflow import Task as TrinityTask
from trinity.common.workflows.workflow import Workflow

from astuner.api import AstunerError, SamplingParams, Task, Trajectory, get_logger, warn_once
from astuner.training import (
    EpisodeSource,
    Sample,
    other_temperature_warning,
    reward_of,
    sampling_from_config,
    untrain_other_temperatures,
)
from astuner_backbone_trinity.model_engine import TrinityModelEngine
from astuner_backbone_trinity.translate import translate

TASK_FIELD = "astuner_task"
TEMPERATURE_KEY = "model.temperature"
# summed over a run's experiences, then its task's runs and the step's tasks (Trinity's `:sum` suffix)
UNTRAINED_METRIC = "astuner/untrained_calls:sum"


class AstunerWorkflow(Workflow):
    """Trinity's view of an astuner workflow run.

    `workflow_args` (from the taskset the backbone writes) hold
    `astuner_config` (the experiment's resolved config file) and
    `astuner_search_paths` (where the workflow's import string is found);
    without them `ASTUNER_CONFIG` / `ASTUNER_SEARCH_PATHS` are read.
    """

    is_async = True
    can_repeat = False
    can_reset = False

    def __init__(self, *, task: TrinityTask, model: Any, auxiliary_models: list[Any] | None = None) -> None:
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)
        args = task.workflow_args or {}
        # Trinity builds this workflow for every run; the rollout stack (workflow, judge, checks, tokenizer,
        # auxiliary models) lives in the runner process's one source for this config, built on its first
        # run and kept until the process exits, with one gateway per event loop the runs use.
        self.episodes = EpisodeSource.shared(args.get("astuner_config"), args.get("astuner_search_paths"))

    def sampling(self) -> SamplingParams:
        """The task's rollout arguments where Trinity set them, the astuner config elsewhere."""
        args = self.task.rollout_args
        return sampling_from_config(self.episodes.config.rollout).override(
            temperature=None if args.temperature is None else float(args.temperature),
            top_p=None if args.top_p is None else float(args.top_p),
            top_k=int(args.top_k) if args.top_k not in (None, -1) else None,
            max_tokens=int(args.max_tokens) if args.max_tokens else None,
        )

    async def run_async(self) -> list[Experience]:
        task = _astuner_task(self.task.raw_task or {})
        engine = TrinityModelEngine(self.model)
        trajectory, samples = await self.episodes.run(
            task, engine, self.sampling(), group_id=str(self.task.task_id or task.task_id)
        )
        if trajectory.error:
            raise AstunerError(f"The astuner workflow failed on task {task.task_id}:\n{trajectory.error}")
        if not samples:
            get_logger().warning("Trinity run made no trainable model call", task=task.task_id)
        if self.task.is_eval:
            return [
                _experience(sample, step, trajectory, self.task.task_id)
                for step, sample in enumerate(samples)
            ]
        return [
            _experience(sample, step, trajectory, self.task.task_id, {UNTRAINED_METRIC: count})
            for step, (sample, count) in enumerate(self._at_trained_temperature(samples, task.task_id))
        ]

    def _at_trained_temperature(self, samples: list[Sample], task_id: str) -> list[tuple[Sample, int]]:
        """Each sample with action mask 0 on calls Trinity's trainer would train at a temperature they
        were not sampled at, and their count; warned about once per runner process."""
        trained_at = _trained_temperature(self.episodes)
        checked = [untrain_other_temperatures(sample, trained_at) for sample in samples]
        asked = [temperature for _, temperatures in checked for temperature in temperatures]
        if asked:
            where = f"the experience metric '{UNTRAINED_METRIC}'"
            message = other_temperature_warning("Trinity", TEMPERATURE_KEY, trained_at, asked, where)
            warn_once(UNTRAINED_METRIC, message, task=task_id)
        return [(sample, len(temperatures)) for sample, temperatures in checked]


@cache
def _trained_temperature(episodes: EpisodeSource) -> float:
    """`model.temperature` of the Trinity config, translated once per source: Trinity builds a workflow
    for every run, and the source lives as long as the runner process."""
    return float(translate(episodes.config, episodes.plugins)[TEMPERATURE_KEY])


def _experience(
    sample: Sample,
    step: int,
    trajectory: Trajectory,
    task_id: int | str,
    metrics: dict[str, float] | None = None,
) -> Experience:
    """A multi-turn Trinity experience: tokens `(T,)`; logprobs and action_mask `(T - prompt_length,)`;
    with per-agent rewards, its agent's reward and group (`task_id` is Trinity's number of the task);
    its metrics the run's, and `metrics`."""
    start = sample.response_spans[0][0]
    logprobs = sample.old_logprobs if sample.old_logprobs is not None else [0.0] * len(sample.input_ids)
    experience = Experience(
        tokens=sample.input_ids,
        prompt_length=start,
        logprobs=logprobs[start:],
        action_mask=sample.loss_mask[start:],
        reward=reward_of(trajectory, sample.agent_name),
        info={"astuner_trajectory": trajectory.trajectory_id, "agent_name": sample.agent_name},
        metrics={k: float(v) for k, v in {**trajectory.metrics, **(metrics or {})}.items()},
    )
    experience.eid.step = step
    if trajectory.agent_rewards:
        experience.eid.task = f"{task_id}/{sample.agent_name}"
    return experience


def _astuner_task(row: dict[str, Any]) -> Task:
    """The astuner task the backbone stored in the row's `astuner_task`."""
    raw = row.get(TASK_FIELD)
    if raw is None:
        raise AstunerError(
            f"The Trinity task row has no '{TASK_FIELD}' field: the workflow "
            f"'{AstunerWorkflow.__module__}.AstunerWorkflow' runs on the task files that "
            "`astuner run --backbone trinity` writes."
        )
    return Task.model_validate(raw) if isinstance(raw, dict) else Task.model_validate_json(raw)
