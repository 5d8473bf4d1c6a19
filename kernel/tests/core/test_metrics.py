"""Rollout scores: reward mean/std, success rate, pass@k (the unbiased estimator), tool use, judge metrics."""

import math

import pytest

from astuner.core.metrics import (
    judge_metrics,
    pass_at_k,
    rollout_metrics,
    scalar_reward,
    succeeded,
    tool_metrics,
)
from astuner.core.trajectory import LLMCall, ToolCall, Trajectory


def _traj(
    group: str,
    reward: float | list[float] | None,
    success: bool | None = None,
    error: str | None = None,
    name: str = "",
) -> Trajectory:
    return Trajectory(
        trajectory_id=f"{group}-{reward}-{name}",
        group_id=group,
        reward=reward,
        is_success=success,
        error=error,
    )


def test_rollout_metrics_and_pass_at_k() -> None:
    runs = [
        _traj("a", 1.0, True),
        _traj("a", 0.0, False),
        _traj("b", 0.0, False),
        _traj("b", None, error="boom"),
    ]
    metrics = rollout_metrics(runs, "val")
    assert metrics["val/reward_mean"] == pytest.approx(1 / 3)
    assert metrics["val/reward_std"] == pytest.approx(math.sqrt(2 / 9))
    assert metrics["val/success_rate"] == 0.25
    assert metrics["val/error_rate"] == 0.25
    assert pass_at_k(runs, 1) == pytest.approx(0.25)  # group a: 1/2, group b: 0
    assert pass_at_k(runs, 2) == pytest.approx(0.5)  # group a: certain with two tries


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    # One task, 5 runs, 2 successes: pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10.
    runs = [_traj("t", r, r > 0, name=str(i)) for i, r in enumerate([1.0, 0.0, 1.0, 0.0, 0.0])]
    assert pass_at_k(runs, 2) == pytest.approx(0.7)
    assert pass_at_k(runs, 1) == pytest.approx(0.4)
    assert pass_at_k(runs, 4) == 1.0  # only 3 failures: any 4 runs hold a success
    assert pass_at_k([], 3) == 0.0


def test_per_step_rewards_sum_and_success_falls_back_to_a_positive_reward() -> None:
    stepped = _traj("a", [0.5, 0.25])
    assert scalar_reward(stepped) == 0.75
    assert succeeded(stepped)  # no verdict from the judge: a positive reward counts
    assert not succeeded(_traj("a", 0.0))
    assert not succeeded(_traj("a", 1.0, success=False))  # the judge's verdict wins
    assert scalar_reward(_traj("a", None)) is None
    assert rollout_metrics([], "eval")["eval/reward_mean"] == 0.0


def test_tool_metrics_count_calls_parse_failures_executions_and_truncations() -> None:
    call = ToolCall(id="call_0_0", name="multiply", arguments='{"a": 3, "b": 4}')
    unanswered = ToolCall(id="call_2_0", name="multiply", arguments="{}")
    result = {"role": "tool", "tool_call_id": "call_0_0", "content": "12"}
    calls = [
        LLMCall(index=0, response_ids=[1], tool_calls=[call]),
        LLMCall(index=1, messages=[result], response_ids=[2], tool_parse_error="invalid JSON"),
        LLMCall(index=2, response_ids=[3], tool_calls=[unanswered]),
        LLMCall(index=3, messages=[result], response_ids=[4], finish_reason="length"),
        LLMCall(index=4, finish_reason="madness", trainable=False),  # a stop reply: not counted
    ]
    answer_2 = {"role": "tool", "tool_call_id": "call_2_0", "content": "0"}
    other_agent = LLMCall(index=0, agent_name="b", messages=[answer_2], response_ids=[5])
    metrics = rollout_metrics([Trajectory(trajectory_id="t", calls=calls), _traj("c", 1.0)], "train")
    assert metrics["train/replies_with_tool_call"] == 0.5  # 2 of 4 replies
    assert metrics["train/tool_parse_failure_rate"] == 0.25  # 1 of 4 replies
    assert metrics["train/tool_parse_failures"] == 1
    assert metrics["train/tool_calls_executed"] == 1  # call_2_0 was never answered
    assert metrics["train/truncation_rate"] == 0.25
    alone = rollout_metrics([Trajectory(trajectory_id="u", calls=[calls[2], other_agent])], "x")
    assert alone["x/tool_calls_executed"] == 0  # another agent's tool message answers nothing here


def test_agent_metrics_per_agent_of_a_multi_agent_workflow() -> None:
    def game(rewards: dict[str, float]) -> Trajectory:
        calls = [
            LLMCall(index=0, agent_name="wolf", response_ids=[1, 2, 3]),
            LLMCall(index=1, agent_name="seer", response_ids=[4]),
            LLMCall(index=2, agent_name="wolf", response_ids=[5]),
        ]
        return Trajectory(trajectory_id="t", calls=calls, reward=0.0, agent_rewards=rewards)

    metrics = rollout_metrics(
        [game({"wolf": 1.0, "seer": -1.0}), game({"wolf": -1.0, "seer": -1.0})], "train"
    )
    assert metrics["train/agent/wolf/reward_mean"] == 0.0 and metrics["train/agent/wolf/win_rate"] == 0.5
    assert metrics["train/agent/seer/reward_mean"] == -1.0 and metrics["train/agent/seer/win_rate"] == 0.0
    assert (
        metrics["train/agent/wolf/calls_mean"] == 2 and metrics["train/agent/wolf/response_tokens_mean"] == 4
    )
    # The judge left the seer out of the second game: that game's 0.5 (the wolf's) is no score of the seer's.
    unscored = rollout_metrics([game({"wolf": 1.0, "seer": -1.0}), game({"wolf": 0.5})], "train")
    assert unscored["train/agent/seer/reward_mean"] == -1.0 and unscored["train/agent/seer/win_rate"] == 0.0
    assert unscored["train/agent/wolf/reward_mean"] == 0.75 and unscored["train/agent/seer/calls_mean"] == 1
    scalar = rollout_metrics([game({}), Trajectory(trajectory_id="u", calls=[], reward=1.0)], "train")
    assert scalar["train/agent/seer/reward_mean"] == 0.5 and scalar["train/agent/wolf/win_rate"] == 0.5
    single = rollout_metrics([Trajectory(trajectory_id="s", calls=[LLMCall()], reward=1.0)], "train")
    assert not any("/agent/" in key for key in single)


def test_tool_use_names_on_a_hand_built_set() -> None:
    """Three episodes, six replies (a stop reply is none), four parsed calls."""

    def reply(n_calls: int, parse_error: str | None = None) -> LLMCall:
        calls = [ToolCall(id=f"c{i}", name="multiply", arguments="{}") for i in range(n_calls)]
        return LLMCall(response_ids=[1], tool_calls=calls, tool_parse_error=parse_error)

    busy = Trajectory(trajectory_id="busy", calls=[reply(2), reply(1), reply(0)])  # two calls in one reply
    once = Trajectory(trajectory_id="once", calls=[reply(0, "invalid JSON"), reply(1), LLMCall()])
    never = Trajectory(trajectory_id="never", calls=[reply(0)])
    metrics = tool_metrics([busy, once, never], "t")
    assert metrics["t/tool_calls_per_reply"] == pytest.approx(4 / 6)
    assert metrics["t/replies_with_tool_call"] == pytest.approx(3 / 6)
    assert metrics["t/episodes_with_tool_call"] == pytest.approx(2 / 3)
    assert metrics["t/tool_parse_failure_rate"] == pytest.approx(1 / 6)
    assert metrics["t/tool_calls_parsed"] == 4 and metrics["t/tool_parse_failures"] == 1
    assert "t/tool_call_rate" not in metrics
    empty = tool_metrics([], "t")
    assert empty["t/tool_calls_per_reply"] == empty["t/episodes_with_tool_call"] == 0.0


def test_judge_metrics_are_averaged_over_the_runs_that_report_them() -> None:
    def run(metrics: dict, error: str | None = None) -> Trajectory:
        t = Trajectory(trajectory_id=str(metrics), reward=1.0, error=error)
        t.metrics.update(metrics)  # as the runner merges them: no validation on the way
        return t

    runs = [
        run({"one_hop/correct": 1.0, "judge/no_answer": 0.0, "rounds": 3}),
        run({"one_hop/correct": 0.0, "judge/no_answer": True}),
        run({"two_hop/correct": 1.0, "judge/no_answer": False, "rounds": 5}),
        run({"one_hop/correct": 1.0, "rounds": 100.0}, error="boom"),  # errored: left out
        run({"rounds": float("nan"), "label": "x", "missing": None}),  # nothing numeric and finite
    ]
    metrics = rollout_metrics(runs, "train")
    judged = {k: v for k, v in metrics.items() if k.startswith("train/judge/")}
    assert judged == {
        "train/judge/one_hop/correct": 0.5,  # the two finished runs that report it
        "train/judge/two_hop/correct": 1.0,  # one run of the other kind: not diluted by the first kind
        "train/judge/no_answer": pytest.approx(1 / 3),  # bools as 0/1, one `judge/`
        "train/judge/rounds": 4.0,
    }
    assert judge_metrics([run({"judge/x": 3.0, "x": 1.0})], "val") == {"val/judge/x": 3.0}
    assert judge_metrics([run({"x": float("inf")})], "val") == {}
    assert judge_metrics([], "val") == {}


def test_a_judge_metric_of_one_agent_is_rolled_up_among_that_agents_metrics() -> None:
    """`agent/<agent>/<metric>` from the judge becomes `<split>/agent/<agent>/judge/<metric>`,
    averaged over the finished runs that report it, and is not listed under `judge/` as well."""

    def game(metrics: dict, error: str | None = None) -> Trajectory:
        calls = [LLMCall(index=0, agent_name="wolf"), LLMCall(index=1, agent_name="seer")]
        t = Trajectory(
            trajectory_id=str(metrics), calls=calls, agent_rewards={"wolf": 1.0, "seer": -1.0}, error=error
        )
        t.metrics.update(metrics)
        return t

    runs = [
        game({"agent/wolf/fallback_share": 0.5, "agent/seer/checked_wolves": 1.0, "village_won": 0.0}),
        game({"agent/wolf/fallback_share": 0.25, "agent/seer/checked_wolves": True, "village_won": 1.0}),
        game({"judge/agent/wolf/fallback_share": 0.0, "agent/wolf/fallback_share": 9.0}),  # judge/ wins
        game({"agent/seer/votes/valid": 1.0, "agent/seer": 2.0, "agent//x": 3.0}),
        game({"agent/wolf/fallback_share": 100.0}, error="boom"),  # errored: left out
    ]
    metrics = rollout_metrics(runs, "train")
    assert metrics["train/agent/wolf/judge/fallback_share"] == pytest.approx(0.25)  # three reporters
    assert metrics["train/agent/seer/judge/checked_wolves"] == 1.0  # two reporters, a bool as 1
    assert metrics["train/agent/seer/judge/votes/valid"] == 1.0  # the metric may have segments
    assert metrics["train/judge/village_won"] == 0.5
    # Beside the agent's own roll-up, not instead of it.
    assert metrics["train/agent/wolf/win_rate"] == 1.0 and metrics["train/agent/seer/calls_mean"] == 1.0
    # Not a metric of one agent: no agent name, or no metric after it, keeps `judge/`.
    assert metrics["train/judge/agent/seer"] == 2.0 and metrics["train/judge/agent//x"] == 3.0
    judged = sorted(k for k in metrics if k.startswith("train/judge/agent/"))
    assert judged == ["train/judge/agent//x", "train/judge/agent/seer"]
    # Without agent metrics of its own (one agent), the judge's numbers of an agent still have their place.
    single = judge_metrics([game({"agent/solver/steps": 4.0})], "val")
    assert single == {"val/agent/solver/judge/steps": 4.0}
