"""Metrics declared once: lookup by pattern, declarations from plugins, a broken plugin left out."""

from __future__ import annotations

import types
from typing import Any

import pytest

from astuner.core.health import HealthMonitor, health_warnings
from astuner.core.metric_catalog import HealthRule, Metric, MetricCatalog, collect_metrics, metric_catalog
from astuner.core.metric_declarations import builtin_catalog
from astuner.hookspecs import hookimpl
from astuner.plugins import Plugins


@pytest.mark.parametrize(
    ("key", "pattern", "label"),
    [
        ("train/reward_mean", "{split}/reward_mean", "mean judge reward"),
        ("val/reward_mean", "{split}/reward_mean", "mean judge reward"),
        ("validation/success_rate", "{split}/success_rate", "success rate"),
        ("eval/pass@8", "{split}/pass@{name}", "pass@8"),
        ("train/judge/one_hop/correct", "{split}/judge/{name}", "one_hop/correct"),
        ("val/agent/alice/reward_mean", "{split}/agent/{name}/reward_mean", "alice: mean judge reward"),
        ("actor/grad_norm", "actor/grad_norm", "gradient norm"),
        ("actor/alice/grad_norm", "actor/{name}/grad_norm", "alice: gradient norm"),
        ("train/tool_calls_per_reply", "{split}/tool_calls_per_reply", "tool calls per reply"),
        ("timing/step_s", "timing/step_s", "step time"),
    ],
)
def test_a_concrete_key_finds_its_declaration(key: str, pattern: str, label: str) -> None:
    resolved = builtin_catalog().resolve(key)
    assert resolved is not None and (resolved["pattern"], resolved["label"]) == (pattern, label)


@pytest.mark.parametrize(
    "key", ["test/reward_mean", "train/reward_mean/x", "train/tool_call_rate", "actor/a/b/grad_norm", "x"]
)
def test_keys_nothing_declares_find_nothing(key: str) -> None:
    assert builtin_catalog().lookup(key) is None


def test_the_split_and_the_units_resolve() -> None:
    resolved = builtin_catalog().resolve("val/response_tokens_mean")
    assert resolved is not None
    assert (resolved["split"], resolved["unit"], resolved["group"]) == ("val", "tokens", "rollout")
    judge = builtin_catalog().resolve("eval/judge/correct")
    assert judge is not None and (judge["group"], judge["split"]) == ("judge", "eval")


def test_the_more_specific_pattern_wins_whatever_the_order() -> None:
    wide = Metric("{split}/judge/{name}", "{name}", group="judge")
    narrow = Metric("{split}/judge/{name}/correct", "{name} correct", group="mine")
    for order in ([wide, narrow], [narrow, wide]):
        catalog = MetricCatalog(order)
        assert catalog.lookup("train/judge/hop/correct") is narrow
        assert catalog.lookup("train/judge/hop/wrong") is wide


def test_every_builtin_declaration_is_complete_and_serializable() -> None:
    declarations = builtin_catalog().as_json()
    assert len({d["key"] for d in declarations}) == len(declarations)
    for d in declarations:
        assert d["label"] and d["description"] and d["group"], d["key"]
    rules = {d["health"]["name"] for d in declarations if d["health"]}
    assert rules == {
        "no_tool_calls",
        "tool_parse_failures",
        "tool_parse_failure_rate",
        "zero_advantage_groups",
        "truncation",
        "prefix_breaks",
        "logprob_gap",
        "rollout_logprob_gap",
    }


def _plugin(name: str, **hooks: object) -> types.ModuleType:
    module = types.ModuleType(name)
    for hook, function in hooks.items():
        setattr(module, hook, function)
    return module


def test_a_plugin_declares_a_metric_with_a_health_rule_through_the_hook() -> None:
    rule = HealthRule("slow_tools", "tools took {tool_latency_s:.1f} s a call", at_least=2.0)

    @hookimpl
    def register_metrics(register):
        register(
            "{split}/tool_latency_s",
            label="tool latency",
            description="Seconds a tool call took.",
            unit="s",
            good="down",
            health=rule,
            console=True,
            group="tools",
        )

    plugins = Plugins(load_entry_points=False)
    plugins.add(_plugin("my_tools", register_metrics=register_metrics), name="my_tools")
    catalog = metric_catalog(plugins)
    metric = catalog.lookup("val/tool_latency_s")
    assert metric is not None and metric.health is rule and metric.unit == "s"
    assert catalog.lookup("train/reward_mean") is not None, "the built-ins are there too"
    assert health_warnings({"train/tool_latency_s": 3.0}, catalog) == [
        ("slow_tools", "tools took 3.0 s a call")
    ]
    assert HealthMonitor(catalog).observe("step 1", {"train/tool_latency_s": 1.0}) == []


def test_a_broken_plugin_is_logged_and_left_out(capsys: pytest.CaptureFixture[str]) -> None:
    @hookimpl
    def register_metrics(register):
        register("{split}/fine", label="fine")
        register("{split}/wrong", label="wrong", good="sideways")

    @hookimpl
    def register_metrics_ok(register):
        register("{split}/kept", label="kept")

    plugins = Plugins(load_entry_points=False)
    plugins.add(_plugin("broken", register_metrics=register_metrics), name="broken")
    plugins.add(_plugin("ok", register_metrics=register_metrics_ok), name="ok")
    catalog = metric_catalog(plugins)
    assert catalog.lookup("train/fine") is None and catalog.lookup("train/kept") is not None
    err = capsys.readouterr().err
    assert "Plugin 'broken' failed to declare its metrics" in err and "sideways" in err


def test_a_key_declared_twice_keeps_the_first(capsys: pytest.CaptureFixture[str]) -> None:
    @hookimpl
    def register_metrics(register):
        register("{split}/reward_mean", label="my reward")

    plugins = Plugins(load_entry_points=False)
    plugins.add(_plugin("again", register_metrics=register_metrics), name="again")
    metric = metric_catalog(plugins).lookup("train/reward_mean")
    assert metric is not None and metric.label == "mean judge reward"
    assert "declares the metric '{split}/reward_mean' that another plugin declared" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("key", "kwargs", "words"),
    [
        ("{split}/{agent}/x", {}, "placeholders"),
        ("/x", {}, "invalid metric key"),
        ("x", {"health": "above 3"}, "HealthRule"),
    ],
)
def test_wrong_declarations_are_refused(key: str, kwargs: dict, words: str, capsys) -> None:
    @hookimpl
    def register_metrics(register):
        register(key, label="x", **kwargs)

    plugins = Plugins(load_entry_points=False, load_defaults=False)
    plugins.add(_plugin("wrong", register_metrics=register_metrics), name="wrong")
    assert metric_catalog(plugins).metrics == []
    assert words in capsys.readouterr().err


@pytest.mark.parametrize(
    ("key", "label", "group"),
    [
        ("train/agent/wolf/judge/fallback_share", "wolf: fallback_share", "agent: wolf"),
        ("val/agent/seer/judge/votes/valid", "seer: votes/valid", "agent: seer"),
        ("train/agent/wolf/reward_mean", "wolf: mean judge reward", "agent: wolf"),
        ("val/agent/seer/win_rate", "seer: win rate", "agent: seer"),
        ("train/agent/seer/calls_mean", "seer: model calls per episode", "agent: seer"),
        ("train/agent/wolf/response_tokens_mean", "wolf: response tokens per episode", "agent: wolf"),
    ],
)
def test_each_agents_metrics_are_one_chart_section_per_agent(key: str, label: str, group: str) -> None:
    """An agent's reward, win rate, calls, tokens and the judge's numbers of it share one group."""
    resolved = builtin_catalog().resolve(key)
    assert resolved is not None and (resolved["label"], resolved["group"]) == (label, group)
    if "/judge/" in key:
        assert resolved["pattern"] == "{split}/agent/{name}/judge/{metric}"


def test_an_agents_judge_metric_named_reward_mean_is_still_a_judge_metric() -> None:
    resolved = builtin_catalog().resolve("train/agent/wolf/judge/reward_mean")
    assert resolved is not None and resolved["pattern"] == "{split}/agent/{name}/judge/{metric}"
    assert builtin_catalog().lookup("train/agent/wolf/judge") is None


def test_a_plugin_may_declare_with_metric_but_not_repeat_a_placeholder() -> None:
    def teams(register: Any) -> None:
        register("{split}/team/{name}/{metric}", label="{name} {metric}", group="team {name}")

    def twice(register: Any) -> None:
        register("{split}/{name}/{name}", label="x")

    catalog = collect_metrics([("teams", teams), ("twice", twice)])
    resolved = catalog.resolve("train/team/red/score")
    assert resolved is not None and (resolved["label"], resolved["group"]) == ("red score", "team red")
    assert [m.key for m in catalog.metrics] == ["{split}/team/{name}/{metric}"]  # `twice` left out
