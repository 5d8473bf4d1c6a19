"""Runs that look fine but are not: the metrics' health rules, checked every step.

A run can show a smooth loss while the model never calls a tool, every
group has the same reward (no learning signal), replies are cut by the
length budget, or the trainer scores tokens differently from the engine
that sampled them. Each such threshold is a `HealthRule` on a declared
metric (`astuner.core.metric_catalog`; the built-in ones in
`astuner.core.metric_declarations`). `health_warnings(metrics, catalog)`
reads one step's metrics and returns one sentence per rule crossed.

A warning keeps telling for as long as it holds: `HealthMonitor` logs the
sentence the first time a check fires and then returns the checks crossed
at every step, so the step's console line is marked (`console_fields`);
`run_health` counts, for a finished run's `metrics.jsonl`, on how many steps
each check fired (the run's closing lines, the log viewer's Metrics tab).

A config may acknowledge a check it crosses on purpose (`health.acknowledged:
[truncation]`: werewolves cuts every reply at 48 tokens by choice). Such a check
is still computed, counted and shown, but says so in one info line instead of
a warning that would send the user to fix what is meant (`check_acknowledged`
refuses a name no declared rule has).
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from astuner.core.metric_catalog import MetricCatalog
from astuner.core.metric_declarations import builtin_catalog
from astuner.errors import ConfigError
from astuner.logs import get_logger

# The metrics a training step's health is read from: the rollouts it trained on and the update.
TRAINING = ("train", "actor")


def _by_name(metrics: Mapping[str, Any], prefixes: Collection[str]) -> tuple[dict[str, float], list[str]]:
    """The metrics under `prefixes` by their names without the prefix, and their full keys."""
    by_name: dict[str, float] = {}
    keys = []
    for key, value in metrics.items():
        head, _, name = key.partition("/")
        if head in prefixes and name and isinstance(value, int | float) and not isinstance(value, bool):
            by_name[name] = float(value)
            keys.append(key)
    return by_name, keys


def health_warnings(
    metrics: Mapping[str, Any],
    catalog: MetricCatalog | None = None,
    prefixes: Collection[str] = TRAINING,
) -> list[tuple[str, str]]:
    """`(check name, sentence)` for every health rule the `metrics` under `prefixes` cross.

    A rule reads the metrics without their prefix (`train/truncation_rate` as
    `truncation_rate`); validation (`val/...`) is left out by default. The
    checks come in the catalog's declaration order; `catalog` defaults to the
    kernel's built-in declarations.
    """
    catalog = catalog or builtin_catalog()
    by_name, keys = _by_name(metrics, prefixes)
    crossed: dict[str, str] = {}
    for key in keys:
        metric = catalog.lookup(key)
        rule = metric.health if metric is not None else None
        if rule is None or rule.name in crossed:
            continue
        if rule.crossed(float(metrics[key]), by_name):
            crossed[rule.name] = rule.sentence(by_name)
    order = [m.health.name for m in catalog.rules() if m.health is not None]
    return sorted(crossed.items(), key=lambda item: order.index(item[0]))


def run_health(
    rows: Sequence[Mapping[str, Any]],
    catalog: MetricCatalog | None = None,
    acknowledged: Collection[str] = (),
) -> list[dict[str, Any]]:
    """For a run's `metrics.jsonl` rows: each check that fired, on how many of the steps.

    Each entry: `check`, `step` (the first step it fired at), `text` (its
    sentence there), `steps` (how many steps it fired on), `of` (how many
    steps have training metrics: a validation-only row, step 0, is not one),
    `acknowledged` (whether the run's config acknowledged it: `health.acknowledged`).
    """
    seen: dict[str, dict[str, Any]] = {}
    trained = 0
    for row in rows:
        numbers = {k: v for k, v in row.items() if k != "step"}
        if not _by_name(numbers, TRAINING)[1]:
            continue
        trained += 1
        for name, sentence in health_warnings(numbers, catalog):
            first = {"check": name, "step": row.get("step"), "text": sentence, "steps": 0}
            entry = seen.setdefault(name, {**first, "acknowledged": name in acknowledged})
            entry["steps"] += 1
    for entry in seen.values():
        entry["of"] = trained
    return list(seen.values())


# How an acknowledged check is marked where it is shown: the closing lines, the step's console line.
ACKNOWLEDGED = "acknowledged in the config"


def health_lines(
    rows: Sequence[Mapping[str, Any]],
    catalog: MetricCatalog | None = None,
    acknowledged: Collection[str] = (),
) -> list[str]:
    """One line per check that fired, for the run's closing lines: `truncation on 4 of 12 steps`.

    A check the config acknowledged (`health.acknowledged`) is still counted,
    and its line says it was acknowledged, so the count is not read as a fault.
    """
    lines = []
    for e in run_health(rows, catalog, acknowledged):
        mark = f" ({ACKNOWLEDGED})" if e["acknowledged"] else ""
        lines.append(f"{e['check']} on {e['steps']} of {e['of']} steps{mark}")
    return lines


def health_check_names(catalog: MetricCatalog) -> list[str]:
    """The names of the catalog's health checks, in declaration order, each once."""
    return list(dict.fromkeys(m.health.name for m in catalog.rules() if m.health is not None))


def check_acknowledged(acknowledged: Collection[str], catalog: MetricCatalog, origin: str = "") -> None:
    """Refuse a `health.acknowledged` name that is no health check of `catalog` (a typo silences nothing).

    `origin`: where the value was set (`config file 'x.yaml'`), for the message.
    """
    known = health_check_names(catalog)
    unknown = [name for name in acknowledged if name not in known]
    if unknown:
        where = f", from {origin}" if origin else ""
        near = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" Did you mean '{near[0]}'?" if near else ""
        raise ConfigError(
            f"health.acknowledged{where}: no health check named {', '.join(map(repr, unknown))}. "
            f"The health checks are: {', '.join(known)}.{hint}"
        )


@dataclass
class HealthMonitor:
    """A run's health checks, step after step (a run keeps one monitor).

    `observe` logs a check's meaning the first time it fires and returns the
    checks crossed at every step, so that the step's console line says so
    while it holds; `steps` counts the steps each check fired on. A check in
    `acknowledged` (the config's `health.acknowledged`) is counted and
    returned too, but its first crossing is one info line, not a warning.
    """

    catalog: MetricCatalog = field(default_factory=builtin_catalog)
    prefixes: tuple[str, ...] = TRAINING
    steps: dict[str, int] = field(default_factory=dict)
    acknowledged: frozenset[str] = frozenset()

    def observe(self, when: str, metrics: Mapping[str, Any]) -> list[str]:
        """The checks this step's `metrics` cross (`when`: "step 3"); warns of each the first time."""
        crossed = []
        for name, sentence in health_warnings(metrics, self.catalog, self.prefixes):
            crossed.append(name)
            if name not in self.steps and name in self.acknowledged:
                get_logger().info(
                    f"{when}: health check '{name}' holds, {ACKNOWLEDGED} (health.acknowledged)."
                )
            elif name not in self.steps:
                get_logger().warning(
                    f"{when}: {sentence} (health check '{name}'; later steps where it holds are "
                    "marked on their console line)"
                )
            self.steps[name] = self.steps.get(name, 0) + 1
        return crossed


def console_fields(
    metrics: Mapping[str, Any],
    catalog: MetricCatalog | None = None,
    crossed: Sequence[str] = (),
    acknowledged: Collection[str] = (),
) -> dict[str, Any]:
    """The fields of a step's console line: each metric declared `console=True`, rounded, and the
    health checks `crossed` at this step (`HealthMonitor.observe`) as `health="!truncation,..."`.

    A check in `acknowledged` (the monitor's) is shown without the `!`, as
    `truncation(acknowledged)`: it holds, and the config says it may.

        crossed = monitor.observe(f"step {step}", metrics)
        fields = console_fields(metrics, catalog, crossed, monitor.acknowledged)
        log.info("step", step=step, of=total, **fields)
    """
    catalog = catalog or builtin_catalog()
    fields: dict[str, Any] = {}
    for key, value in metrics.items():
        metric = catalog.lookup(key)
        if metric is not None and metric.console and isinstance(value, int | float):
            fields[key] = round(float(value), 4)
    if crossed:
        fields["health"] = ",".join(
            f"{name}(acknowledged)" if name in acknowledged else f"!{name}" for name in crossed
        )
    return fields
