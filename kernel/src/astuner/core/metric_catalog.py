"""Every step metric declared once: what it means, how it is shown, when it is a warning.

A metric's declaration (`Metric`) says what its `metrics.jsonl` key means to
a person: a label, a description, a unit, which direction is good, the group
it is charted in, whether each step's console line shows it, and optionally a
`HealthRule`, a threshold whose crossing means the run looks fine but is not.
The console line, TensorBoard's chart layout, the log viewer's charts and the
health checks all read the same declarations, so a metric's meaning lives in
one place.

Plugins declare metrics through the `register_metrics` hook (the kernel's
own, in `astuner.core.metric_declarations`, through the default plugin
`astuner.default_plugins.metrics`); `metric_catalog(plugins)` collects them.
Keys are patterns: `{split}` stands for a split (train, val, validation,
eval, and debug: the debug backbone's rollouts), `{name}` and `{metric}`
each for one path segment, or, the one at the end of a pattern, for the rest
of the key (a judge's `one_hop/correct` under `{split}/judge/{name}`). Two
placeholders let a pattern name both whose metric it is and which one: an
agent's judge metrics are `{split}/agent/{name}/judge/{metric}`. A label and
a group may use `{name}` and `{metric}`, so one declaration gives each agent
a chart section of its own (`group="agent: {name}"`):

    catalog = metric_catalog(plugins)
    catalog.lookup("val/reward_mean").label  # "mean judge reward"
    catalog.resolve("train/agent/wolf/judge/invalid_votes")["group"]  # "agent: wolf"
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from astuner.logs import get_logger

if TYPE_CHECKING:
    from astuner.hookspecs import RegisterMetric
    from astuner.plugins import Plugins

SPLITS = ("train", "val", "validation", "eval", "debug")
GOOD = ("up", "down", None)
_PLACEHOLDER = re.compile(r"\{(split|name|metric)\}")
_FILLED = ("name", "metric")


@dataclass(frozen=True)
class HealthRule:
    """When a metric says a run looks fine but is not, and what that means.

    The rule reads the metrics of one split by their names without the split
    (`train/truncation_rate` and `actor/grad_norm` as `truncation_rate` and
    `grad_norm`). It is crossed when the metric it is declared on is there,
    is at least `at_least` and at most `at_most` (each when given), and
    `when(metrics)` holds (when given: a compound condition on other metrics
    of the split, e.g. that tools were offered at all). `meaning` is the
    sentence a user reads, formatted with those metrics
    (`"{truncation_rate:.0%} of the replies were cut ..."`; a missing one is 0).
    `name` names the check in warnings and the run's closing lines.
    """

    name: str
    meaning: str
    at_least: float | None = None
    at_most: float | None = None
    when: Callable[[Mapping[str, float]], bool] | None = None

    def crossed(self, value: float, metrics: Mapping[str, float]) -> bool:
        """Whether `value` (this metric's) and the split's `metrics` cross the rule."""
        if self.at_least is not None and not value >= self.at_least:
            return False
        if self.at_most is not None and not value <= self.at_most:
            return False
        return self.when is None or bool(self.when(metrics))

    def sentence(self, metrics: Mapping[str, float]) -> str:
        """The meaning, filled in with the split's metrics."""
        return self.meaning.format_map(_ZeroForMissing(metrics))


class _ZeroForMissing(dict[str, float]):
    def __missing__(self, key: str) -> float:
        return 0.0


@dataclass(frozen=True)
class Metric:
    """One declared metric (see the module docstring for `key`'s placeholders).

    `label` is short and readable ("mean judge reward"; it may use `{name}`
    and `{metric}`),
    `description` one or two sentences on what it measures, `unit` what its
    numbers count ("s", "tokens", "" for a share or plain number), `good`
    "up", "down" or None, `health` its `HealthRule`, `console` whether each
    step's console line shows it, `group` the chart section it belongs to
    (it may use `{name}` and `{metric}` too: a section per agent).
    """

    key: str
    label: str
    description: str = ""
    unit: str = ""
    good: str | None = None
    health: HealthRule | None = None
    console: bool = False
    group: str = ""

    def pattern(self) -> re.Pattern[str]:
        """The regular expression a concrete key must match in full."""
        return _compile(self.key)

    def resolve(self, key: str) -> dict[str, Any] | None:
        """This declaration as it applies to the concrete `key`, as plain data; None if it does not match.

        `label` and `group` have `{name}` and `{metric}` filled in; `split` is
        the key's split (or None).
        """
        found = self.pattern().fullmatch(key)
        if found is None:
            return None
        parts = found.groupdict()
        return {
            "key": key,
            "pattern": self.key,
            "label": _fill(self.label, parts),
            "description": self.description,
            "unit": self.unit,
            "good": self.good,
            "group": _fill(self.group, parts),
            "console": self.console,
            "split": parts.get("split"),
            "health": None if self.health is None else self.health.name,
        }

    def as_json(self) -> dict[str, Any]:
        """The declaration as plain data (the health rule's name and meaning, not its condition)."""
        health = None if self.health is None else {"name": self.health.name, "meaning": self.health.meaning}
        return {
            "key": self.key,
            "label": self.label,
            "description": self.description,
            "unit": self.unit,
            "good": self.good,
            "group": self.group,
            "console": self.console,
            "health": health,
        }


def _fill(text: str, parts: Mapping[str, str | None]) -> str:
    """`text` with each `{name}` and `{metric}` replaced by that part of a concrete key."""
    for part in _FILLED:
        text = text.replace(f"{{{part}}}", parts.get(part) or "")
    return text


@cache
def _compile(key: str) -> re.Pattern[str]:
    pieces = _PLACEHOLDER.split(key)
    out = []
    for i, piece in enumerate(pieces):
        if i % 2 == 0:
            out.append(re.escape(piece))
        elif piece == "split":
            out.append("(?P<split>" + "|".join(SPLITS) + ")")
        else:
            last = i == len(pieces) - 2 and pieces[-1] == ""
            out.append(f"(?P<{piece}>.+)" if last else f"(?P<{piece}>[^/]+)")
    return re.compile("".join(out))


def _specificity(metric: Metric) -> tuple[int, int]:
    """Patterns with more fixed text win: `{split}/agent/{name}/reward_mean` over `{split}/judge/{name}`."""
    literal = _PLACEHOLDER.sub("", metric.key)
    return (-len(literal), metric.key.count("{name}") + metric.key.count("{metric}"))


class MetricCatalog:
    """The declared metrics, looked up by concrete key."""

    def __init__(self, metrics: Iterable[Metric] = ()) -> None:
        self.metrics: list[Metric] = []
        self._exact: dict[str, Metric] = {}
        self._patterns: list[Metric] = []
        self._found: dict[str, Metric | None] = {}
        for metric in metrics:
            self.add(metric)

    def add(self, metric: Metric) -> bool:
        """Add a declaration; False (and not added) if its key is declared already."""
        if any(m.key == metric.key for m in self.metrics):
            return False
        self.metrics.append(metric)
        if _PLACEHOLDER.search(metric.key):
            self._patterns.append(metric)
            self._patterns.sort(key=_specificity)
        else:
            self._exact[metric.key] = metric
        self._found.clear()
        return True

    def lookup(self, key: str) -> Metric | None:
        """The declaration of a concrete key (`train/reward_mean`), or None if nothing declares it."""
        if key in self._found:
            return self._found[key]
        found = self._exact.get(key)
        if found is None:
            found = next((m for m in self._patterns if m.pattern().fullmatch(key)), None)
        self._found[key] = found
        return found

    def resolve(self, key: str) -> dict[str, Any] | None:
        """`lookup(key)` resolved for this key (`Metric.resolve`), or None."""
        metric = self.lookup(key)
        return None if metric is None else metric.resolve(key)

    def rules(self) -> list[Metric]:
        """The declarations with a health rule, in declaration order."""
        return [m for m in self.metrics if m.health is not None]

    def as_json(self) -> list[dict[str, Any]]:
        """Every declaration as plain data, in declaration order (for the log viewer)."""
        return [m.as_json() for m in self.metrics]


def _register_into(staged: list[Metric]) -> RegisterMetric:
    def register(
        key: str,
        *,
        label: str,
        description: str = "",
        unit: str = "",
        good: str | None = None,
        health: Any = None,
        console: bool = False,
        group: str = "",
    ) -> None:
        if not isinstance(key, str) or not key or key.startswith("/") or key.endswith("/"):
            raise ValueError(f"invalid metric key {key!r}: a path such as '{{split}}/reward_mean'")
        placeholders = re.findall(r"\{([^}]*)\}", key)
        if set(placeholders) - {"split", "name", "metric"}:
            raise ValueError(
                f"metric key {key!r}: the only placeholders are {{split}}, {{name}} and {{metric}}"
            )
        if len(placeholders) != len(set(placeholders)):
            raise ValueError(f"metric key {key!r}: each placeholder at most once")
        if good not in GOOD:
            raise ValueError(f"metric {key!r}: good is 'up', 'down' or None, not {good!r}")
        if health is not None and not isinstance(health, HealthRule):
            raise TypeError(f"metric {key!r}: health must be an astuner.training.HealthRule")
        staged.append(Metric(key, label, description, unit, good, health, console, group))

    return register


def collect_metrics(hooks: Iterable[tuple[str, Callable[..., Any]]]) -> MetricCatalog:
    """The catalog of what each `(plugin name, register_metrics function)` declares.

    A plugin whose hook raises (or declares a metric wrongly) is logged and
    left out, with all its declarations; the others still count. A key two
    plugins declare keeps the first one's declaration.
    """
    catalog = MetricCatalog()
    for plugin_name, function in hooks:
        staged: list[Metric] = []
        try:
            function(register=_register_into(staged))
        except Exception as exc:  # one plugin's mistake must not hide every metric's meaning
            get_logger().warning(
                f"Plugin '{plugin_name}' failed to declare its metrics ({type(exc).__name__}: {exc}); "
                "its metrics are shown without labels or health checks."
            )
            continue
        for metric in staged:
            if not catalog.add(metric):
                get_logger().warning(
                    f"Plugin '{plugin_name}' declares the metric '{metric.key}' that another plugin "
                    "declared already; the first declaration is kept."
                )
    return catalog


def metric_catalog(plugins: Plugins) -> MetricCatalog:
    """The metrics every loaded plugin declares (the kernel's built-ins first)."""
    impls = plugins.pm.hook.register_metrics.get_hookimpls()
    return collect_metrics((impl.plugin_name, impl.function) for impl in impls)
