"""Health checks: a threshold crossed says what it means once, then marks every step it holds."""

import pytest

from astuner.core.health import (
    HealthMonitor,
    check_acknowledged,
    console_fields,
    health_lines,
    health_warnings,
    run_health,
)
from astuner.core.metric_declarations import builtin_catalog
from astuner.errors import ConfigError

HEALTHY = {
    "train/tools_offered_rate": 1.0,
    "train/replies_with_tool_call": 0.4,
    "train/tool_parse_failure_rate": 0.01,
    "train/tool_calls_parsed": 12.0,
    "train/tool_parse_failures": 2.0,
    "train/zero_adv_group_frac": 0.25,
    "train/truncation_rate": 0.05,
    "train/prefix_breaks": 1.0,
    "train/samples_per_episode": 1.1,
    "actor/logprob_gap": 0.01,
}


@pytest.mark.parametrize(
    ("change", "check", "words"),
    [
        (
            {
                "train/replies_with_tool_call": 0.0,
                "train/tool_calls_parsed": 0.0,
                "train/tool_parse_failures": 0.0,
            },
            "no_tool_calls",
            "called none",
        ),
        ({"train/tool_parse_failures": 12.0}, "tool_parse_failures", "could not be parsed"),
        ({"train/tool_parse_failure_rate": 0.05}, "tool_parse_failure_rate", "5% of the replies"),
        ({"train/zero_adv_group_frac": 0.875}, "zero_advantage_groups", "88% of the task groups"),
        ({"train/truncation_rate": 0.5}, "truncation", "50% of the replies"),
        ({"train/prefix_breaks": 9.0, "train/samples_per_episode": 3.5}, "prefix_breaks", "3.5 samples"),
        ({"actor/logprob_gap": 0.4}, "logprob_gap", "0.400"),
        (
            {"actor/logprob_gap": 0.4, "actor/rollout_logprob_gap": 0.3, "actor/rollout_kl": 0.2},
            "rollout_logprob_gap",
            "by 0.300 on average (estimated KL 0.200)",
        ),
    ],
)
def test_each_check_fires_on_its_threshold_and_says_why(change, check, words):
    assert health_warnings(HEALTHY) == []
    ((name, sentence),) = health_warnings({**HEALTHY, **change})
    assert name == check and words in sentence


def test_validation_metrics_and_runs_without_tools_do_not_fire():
    assert health_warnings({"val/replies_with_tool_call": 0.0, "val/tools_offered_rate": 1.0}) == []
    assert health_warnings({"train/replies_with_tool_call": 0.0, "train/tools_offered_rate": 0.0}) == []
    assert health_warnings({"debug/truncation_rate": 0.9}, prefixes=("debug",))[0][0] == "truncation"


def test_a_check_warns_once_and_marks_every_step_it_holds(capsys):
    """Zero-advantage groups at steps 5, 6, 7 and 12 of 14: one warning, four marked steps."""
    monitor = HealthMonitor()
    bad_steps = {5, 6, 7, 12}
    rows = []
    marked = []
    for step in range(1, 15):
        row = {**HEALTHY, "train/zero_adv_group_frac": 0.9 if step in bad_steps else 0.1}
        rows.append({"step": step, **row})
        line = console_fields(row, crossed=monitor.observe(f"step {step}", row))
        if line.get("health") == "!zero_advantage_groups":
            marked.append(step)
    assert marked == [5, 6, 7, 12]
    assert monitor.steps == {"zero_advantage_groups": 4}
    err = capsys.readouterr().err
    assert err.count("health check 'zero_advantage_groups'") == 1 and "step 5: 90% of the task groups" in err
    ((entry),) = run_health([{"step": 0, "val/reward_mean": 0.5}, *rows])
    assert (entry["check"], entry["step"], entry["steps"], entry["of"]) == ("zero_advantage_groups", 5, 4, 14)
    assert health_lines(rows) == ["zero_advantage_groups on 4 of 14 steps"]


def test_the_console_line_shows_the_declared_metrics_and_marks_crossed_checks():
    metrics = {**HEALTHY, "train/reward_mean": 0.123456, "train/merge_ratio": 2.0, "timing/step_s": 3.0}
    line = console_fields(metrics, crossed=["truncation", "tool_parse_failure_rate"])
    assert line["train/reward_mean"] == 0.1235 and line["timing/step_s"] == 3.0
    assert "train/merge_ratio" not in line and "train/tool_parse_failures" in line
    assert line["health"] == "!truncation,!tool_parse_failure_rate"
    assert "health" not in console_fields(metrics)


def test_parse_failures_above_five_percent_warn(capsys):
    monitor = HealthMonitor()
    step = {**HEALTHY, "train/tool_parse_failures": 3.0, "train/tool_parse_failure_rate": 0.0625}
    assert monitor.observe("step 2", step) == ["tool_parse_failure_rate"]
    assert monitor.observe("step 3", {**step, "train/tool_parse_failure_rate": 0.049}) == []
    err = capsys.readouterr().err
    assert "step 2: 6% of the replies held a tool call that could not be parsed (3 this step)" in err


def test_the_monitor_warns_once_per_run(capsys):
    monitor = HealthMonitor()
    bad = {**HEALTHY, "train/truncation_rate": 0.9}
    assert monitor.observe("step 1", bad) == ["truncation"]
    assert monitor.observe("step 2", bad) == ["truncation"]
    err = capsys.readouterr().err
    assert err.count("health check 'truncation'") == 1 and "step 1: 90% of the replies" in err


def test_an_acknowledged_check_is_one_info_line_and_still_counted_and_marked(capsys):
    """werewolves cuts its replies at 48 tokens on purpose: `health.acknowledged: [truncation]`."""
    monitor = HealthMonitor(acknowledged=frozenset({"truncation"}))
    cut = {**HEALTHY, "train/truncation_rate": 1.0, "train/zero_adv_group_frac": 0.9}
    rows = []
    for step in (1, 2):
        crossed = monitor.observe(f"step {step}", cut)
        assert crossed == ["truncation", "zero_advantage_groups"]
        line = console_fields(cut, crossed=crossed, acknowledged=monitor.acknowledged)
        assert line["health"] == "truncation(acknowledged),!zero_advantage_groups"
        rows.append({"step": step, **cut})
    assert monitor.steps == {"zero_advantage_groups": 2, "truncation": 2}
    err = capsys.readouterr().err
    assert err.count("health check 'truncation'") == 1
    assert "step 1: health check 'truncation' holds, acknowledged in the config (health.acknowledged)" in err
    assert "replies were cut" not in err and "[warning" in err  # the other check still warns
    assert health_lines(rows, acknowledged=["truncation"]) == [
        "truncation on 2 of 2 steps (acknowledged in the config)",
        "zero_advantage_groups on 2 of 2 steps",
    ]


def test_an_unknown_acknowledged_name_is_refused_naming_the_key_the_name_and_the_checks():
    check_acknowledged(["truncation", "no_tool_calls"], builtin_catalog())
    with pytest.raises(ConfigError) as refused:
        check_acknowledged(["truncaton"], builtin_catalog(), "config file 'w.yaml' (line 9)")
    message = str(refused.value)
    assert message.startswith("health.acknowledged, from config file 'w.yaml' (line 9): ")
    assert "no health check named 'truncaton'" in message and "Did you mean 'truncation'?" in message
    assert "truncation, no_tool_calls, tool_parse_failures" in message and "rollout_logprob_gap" in message
