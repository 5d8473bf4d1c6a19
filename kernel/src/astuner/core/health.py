"""Runs that look fine but are not: thresholds on step metrics, each with what it means.

A run can show a smooth loss while the model never calls a tool, every
group has the same reward (no learning signal), replies are cut by the
length budget, or the trainer scores tokens differently from the engine
that sampled them. `health_warnings(metrics)` reads a step's metrics (as
`rollout_metrics` and the trainers write them, under any prefix) and
returns one sentence per threshold crossed; `HealthMonitor` logs each kind
once per run, so a warning is noticed and not repeated every step, and
`run_health` lists them for a finished run (the log viewer's Metrics tab).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from astuner.logs import get_logger


@dataclass(frozen=True)
class HealthCheck:
    """`name` fires when `crossed(metrics under one prefix)` is true; `meaning` is formatted with them."""

    name: str
    crossed: Callable[[Mapping[str, float]], bool]
    meaning: str


def _get(m: Mapping[str, float], key: str) -> float:
    return float(m.get(key, 0.0))


HEALTH_CHECKS: tuple[HealthCheck, ...] = (
    HealthCheck(
        "no_tool_calls",
        lambda m: _get(m, "tools_offered_rate") > 0 and "tool_call_rate" in m and m["tool_call_rate"] == 0,
        "the agent offered tools in {tools_offered_rate:.0%} of the model calls, but the model called "
        "none. Check that the tools reach the model (the 'tool format' line at the start of the run; "
        "model.tool_format) and consider a model.tool_demonstration for a small model.",
    ),
    HealthCheck(
        "tool_parse_failures",
        lambda m: (
            _get(m, "tool_parse_failures") > 0
            and _get(m, "tool_parse_failures") >= _get(m, "tool_calls_parsed")
        ),
        "{tool_parse_failures:.0f} replies tried to call a tool but could not be parsed, as many as or "
        "more than the calls that parsed: the model writes the call format wrongly (see "
        "tool_parse_error in the records), or context_tracker.tool_parser does not match the model.",
    ),
    HealthCheck(
        "zero_advantage_groups",
        lambda m: _get(m, "zero_adv_group_frac") >= 0.8,
        "{zero_adv_group_frac:.0%} of the task groups gave every rollout the same reward, so they carry "
        "no learning signal: the tasks are too hard or too easy for the model, or the judge only "
        "gives a few distinct rewards. Raise rollout.num_repeat or change the task mix.",
    ),
    HealthCheck(
        "truncation",
        lambda m: _get(m, "truncation_rate") >= 0.2,
        "{truncation_rate:.0%} of the replies were cut by rollout.max_response_length_in_one_turn; cut "
        "replies rarely get a reward. Raise the budget or ask for shorter answers.",
    ),
    HealthCheck(
        "prefix_breaks",
        lambda m: _get(m, "prefix_breaks") > 0 and _get(m, "samples_per_episode") > 2,
        "{prefix_breaks:.0f} model calls did not extend the conversation before them (an edited "
        "history), so episodes became {samples_per_episode:.1f} samples each and shared prefixes are "
        "re-encoded. The viewer marks each break with its reason.",
    ),
    HealthCheck(
        "logprob_gap",
        lambda m: _get(m, "logprob_gap") >= 0.1 and "rollout_logprob_gap" not in m,
        "the trainer's log-probs differ from the engine's on the same tokens by {logprob_gap:.3f} on "
        "average: the engine samples from other weights or another dtype than the trainer trains, so "
        "the update is off-policy. Check the weight sync and the dtypes of engine and trainer.",
    ),
    HealthCheck(
        "rollout_logprob_gap",
        lambda m: _get(m, "rollout_logprob_gap") >= 0.1,
        "before the update, the trainer's log-probs differ from the engine's on the same tokens by "
        "{rollout_logprob_gap:.3f} on average (estimated KL {rollout_kl:.3f}): the engine samples from "
        "other weights or another dtype than the trainer trains, so the update is off-policy. Check "
        "the weight sync (each call's policy_version) and the dtypes of engine and trainer, or "
        "correct for it with trainer_common.algorithm.rollout_correction.rollout_is.",
    ),
)


def health_warnings(
    metrics: Mapping[str, float],
    prefixes: tuple[str, ...] = ("train", "actor"),
    checks: tuple[HealthCheck, ...] = HEALTH_CHECKS,
) -> list[tuple[str, str]]:
    """`(check name, sentence)` for every check crossed by the `metrics` under `prefixes`
    (`train/tool_call_rate` is read as `tool_call_rate`; `val/...` is left out by default)."""
    by_name: dict[str, float] = {}
    for key, value in metrics.items():
        head, _, name = key.partition("/")
        if head in prefixes and name and isinstance(value, int | float):
            by_name[name] = float(value)
    out = []
    for check in checks:
        if check.crossed(by_name):
            out.append((check.name, check.meaning.format_map(_Defaults(by_name))))
    return out


def run_health(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """For a run's `metrics.jsonl` rows: each check that fired, at the first step it did."""
    seen: dict[str, dict[str, Any]] = {}
    for row in rows:
        numbers = {k: v for k, v in row.items() if isinstance(v, int | float) and k != "step"}
        for name, sentence in health_warnings(numbers):
            seen.setdefault(name, {"check": name, "step": row.get("step"), "text": sentence})
    return list(seen.values())


class _Defaults(dict[str, float]):
    def __missing__(self, key: str) -> float:
        return 0.0


@dataclass
class HealthMonitor:
    """Logs each health warning once per run (a run keeps one monitor)."""

    fired: set[str] = field(default_factory=set)

    prefixes: tuple[str, ...] = ("train", "actor")

    def observe(self, when: str, metrics: Mapping[str, float]) -> list[str]:
        """Warn about checks crossed for the first time (`when`: "step 3"); returns their names."""
        new = []
        for name, sentence in health_warnings(metrics, self.prefixes):
            if name not in self.fired:
                self.fired.add(name)
                new.append(name)
                get_logger().warning(f"{when}: {sentence} (health check '{name}', warned once per run)")
        return new
