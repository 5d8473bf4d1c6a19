"""The verl agent loop `astuner`: one astuner workflow run per sample verl hands it.

verl instantiates the loop in its AgentLoopWorker (through hydra, with the
trainer config, its `server_manager`, the tokenizer and any extra keys of
the agent-loop YAML) and awaits `run(sampling_params, **row)`. The loop reads
the astuner task from the row's `extra_info`, runs the user's workflow,
judge and madness checks with a `ModelTuner` whose engine is verl's server
manager (token ids in, token ids and log-probs out), merges the recorded
calls, and returns the sample as verl's prompt/response ids, mask and
log-probs with the judge's reward.

A linear episode merges into one sample. verl takes one sequence per run,
so an episode that merges into several (a context reset, several agents)
contributes its first sample, and `extra_fields["astuner_samples_dropped"]`
counts the rest. A run that failed (the workflow raised, a prompt longer
than `data.max_prompt_length`) comes back with a zero response mask: verl
keeps its place in the batch and trains nothing on it.

Per-agent rewards (a judge's `JudgeOutput(reward={agent: value})`): verl
groups the runs of one prompt by the `uid` it gives the row, and the loop
cannot change that key, so it makes each group one agent's instead: every
run of a group hands over the sample of the same agent, with that agent's
own reward. The agent is picked from the uid among the trainable agents the
judge scored, so over the prompts of a step every such agent trains.

One temperature: verl's actor recomputes every log-prob at
`actor_rollout_ref.rollout.temperature`, so a call the workflow sampled at
another (a per-call override) gets loss mask 0: it stays in the sequence
but is not trained. `extra_fields["astuner_untrained_calls"]` counts such
calls per run, and the worker warns once. Only runs verl starts at that
temperature are checked: the others (validation at `val_kwargs`, REMAX's
greedy baseline) are not trained.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Sequence
from typing import Any

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from astuner.api import Task, Trajectory, get_logger, warn_once
from astuner.training import (
    EpisodeSource,
    Sample,
    other_temperature_warning,
    reward_of,
    sampling_from_config,
    untrain_other_temperatures,
)
from astuner_backbone_verl.server_engine import VerlServerEngine
from astuner_backbone_verl.translate import AGENT_LOOP_NAME

TASK_FIELD = "astuner_task"
UNTRAINED_FIELD = "astuner_untrained_calls"
TEMPERATURE_KEY = "actor_rollout_ref.rollout.temperature"


@register(AGENT_LOOP_NAME)
class AstunerAgentLoop(AgentLoopBase):
    """verl's view of an astuner workflow run.

    `astuner_config` (the resolved astuner config file) and
    `astuner_search_paths` (where the workflow's import string is found)
    come from the agent-loop YAML the backbone writes; without them the
    environment variables `ASTUNER_CONFIG` / `ASTUNER_SEARCH_PATHS` are read.
    """

    def __init__(
        self,
        *args: Any,
        astuner_config: str | None = None,
        astuner_search_paths: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("name", None)  # hydra passes the registry entry's name along
        super().__init__(*args, **kwargs)
        # verl builds this loop for every sample; the rollout stack (workflow, judge, checks, tokenizer,
        # auxiliary models) lives in the worker process's one source for this config, built on its first
        # episode and kept until the worker exits, with one gateway on the worker's event loop.
        self.episodes = EpisodeSource.shared(astuner_config, astuner_search_paths)
        rollout = self.config.actor_rollout_ref.rollout
        self.prompt_length = int(rollout.prompt_length)
        self.response_length = int(rollout.response_length)
        self.trained_at = float(rollout.temperature)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        started = time.perf_counter()
        task = _task_of(kwargs)
        sampling = sampling_from_config(self.episodes.config.rollout).override(
            temperature=_number(sampling_params.get("temperature"), float),
            top_p=_number(sampling_params.get("top_p"), float),
            top_k=_number(sampling_params.get("top_k"), int),
        )
        engine = VerlServerEngine(self.server_manager, extra=sampling_params)
        trajectory, samples = await self.episodes.run(
            task, engine, sampling, group_id=str(kwargs.get("index"))
        )
        given = sampling_params.get("temperature")
        training = given is None or math.isclose(float(given), self.trained_at)
        output = self._output(trajectory, samples, kwargs, self.episodes.trainable_targets, training=training)
        output.metrics = AgentLoopMetrics(generate_sequences=engine.seconds)
        output.extra_fields["astuner_seconds"] = time.perf_counter() - started
        return output

    def _output(
        self,
        trajectory: Trajectory,
        samples: list[Sample],
        row: dict[str, Any],
        trainable: Sequence[str],
        *,
        training: bool = True,
    ) -> AgentLoopOutput:
        """verl's sequence of the run: its first sample, or with per-agent rewards its group agent's;
        in a `training` run, its calls sampled at another temperature than verl's trainer's masked out."""
        agent = group_agent(trajectory, trainable, str(row.get("uid") or trajectory.task_id))
        reward = reward_of(trajectory, agent)
        kept = samples if agent is None else [s for s in samples if s.agent_name == agent]
        extra: dict[str, Any] = {"astuner_samples_dropped": len(samples) - len(kept[:1])}
        if kept:
            sample = kept[0]
            if training:
                sample = self._at_trained_temperature(sample, trajectory, extra)
            start = sample.response_spans[0][0]
            if start <= self.prompt_length:
                response = slice(start, start + self.response_length)
                logprobs = sample.old_logprobs[response] if sample.old_logprobs is not None else None
                return AgentLoopOutput(
                    prompt_ids=sample.input_ids[:start],
                    response_ids=sample.input_ids[response],
                    response_mask=sample.loss_mask[response],
                    response_logprobs=logprobs,
                    reward_score=reward,
                    num_turns=len(trajectory.calls) * 2 + 1,
                    metrics=AgentLoopMetrics(),
                    extra_fields=extra,
                )
            extra["astuner_error"] = (
                f"prompt of {start} tokens exceeds data.max_prompt_length={self.prompt_length}"
            )
        else:
            caller = "the run" if agent is None else f"agent '{agent}', the one this verl group trains,"
            extra["astuner_error"] = (trajectory.error or f"{caller} made no trainable model call")[-2000:]
        get_logger().warning(
            "verl sample not trained", task=trajectory.task_id, reason=extra["astuner_error"]
        )
        return self._untrained(row, reward, extra)

    def _at_trained_temperature(
        self, sample: Sample, trajectory: Trajectory, extra: dict[str, Any]
    ) -> Sample:
        """`sample` with loss mask 0 on calls verl's trainer would train at a temperature they were not
        sampled at; their count into `extra`, warned about once per worker."""
        sample, asked = untrain_other_temperatures(sample, self.trained_at)
        extra[UNTRAINED_FIELD] = len(asked)
        if asked:
            where = f'extra_fields["{UNTRAINED_FIELD}"]'
            message = other_temperature_warning("verl", TEMPERATURE_KEY, self.trained_at, asked, where)
            warn_once(UNTRAINED_FIELD, message, task=trajectory.task_id)
        return sample

    def _untrained(self, row: dict[str, Any], reward: float, extra: dict[str, Any]) -> AgentLoopOutput:
        """The row's own prompt and one end-of-sequence token, masked out."""
        prompt = self.tokenizer.apply_chat_template(
            list(row.get("raw_prompt") or []), add_generation_prompt=True, tokenize=True
        )
        # transformers 5 returns a BatchEncoding where 4.x returned the ids
        ids = prompt["input_ids"] if hasattr(prompt, "keys") else prompt
        prompt_ids = list(ids)[-self.prompt_length :]
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=[self.tokenizer.eos_token_id],
            response_mask=[0],
            response_logprobs=[0.0],
            reward_score=reward,
            num_turns=0,
            metrics=AgentLoopMetrics(),
            extra_fields=extra,
        )


def group_agent(trajectory: Trajectory, trainable: Sequence[str], group: str) -> str | None:
    """With per-agent rewards, the agent whose sample a run of verl group `group` (the row's `uid`)
    hands over: the same in every run of the group, one of the `trainable` agents (empty: all) the
    judge scored. None without per-agent rewards."""
    agents = sorted(name for name in trajectory.agent_rewards if not trainable or name in trainable)
    return agents[zlib.crc32(group.encode()) % len(agents)] if agents else None


def _number(value: Any, kind: type) -> Any:
    """verl's sampling value as `kind`, None when verl sets none (the astuner config's then)."""
    return None if value is None else kind(value)


def _task_of(row: dict[str, Any]) -> Task:
    """The astuner task the backbone stored in the row's extra_info."""
    extra = row.get("extra_info") or {}
    raw = extra.get(TASK_FIELD) if isinstance(extra, dict) else None
    if raw is None:
        raise ValueError(
            f"The verl dataset row has no extra_info.{TASK_FIELD}: the agent loop '{AGENT_LOOP_NAME}' runs "
            "on the task files `astuner run --backbone verl` writes."
        )
    return Task.model_validate_json(raw)
