"""Scores of a set of finished trajectories: reward mean/std, success rate, pass@k, tool use,
and the means of what judges and workflows report in `Trajectory.metrics`.

Shared by everything that reports on rollouts (the torch backbone's training
and validation steps, `astuner eval`), so the numbers mean the same thing
everywhere. Pure functions of the trajectories; no torch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from astuner.core.trajectory import Trajectory


def scalar_reward(trajectory: Trajectory) -> float | None:
    """The trajectory's reward as one number (the sum of per-step rewards), or None if unscored."""
    reward = trajectory.reward
    if isinstance(reward, list):
        return float(sum(reward))
    return None if reward is None else float(reward)


def succeeded(trajectory: Trajectory) -> bool:
    """`is_success` when the judge said, else a positive reward."""
    if trajectory.is_success is not None:
        return trajectory.is_success
    reward = scalar_reward(trajectory)
    return reward is not None and reward > 0


def rollout_metrics(trajectories: Sequence[Trajectory], prefix: str) -> dict[str, float]:
    """Reward mean/std, success, madness and error rates, response length, turns, then
    `tool_metrics`, `agent_metrics` and `judge_metrics` under the same `prefix` (the judge's
    numbers of one agent among that agent's, `<prefix>/agent/<agent>/judge/<metric>`)."""
    n = max(len(trajectories), 1)
    scored = [r for t in trajectories if t.error is None and (r := scalar_reward(t)) is not None]
    mean = sum(scored) / len(scored) if scored else 0.0
    std = math.sqrt(sum((r - mean) ** 2 for r in scored) / len(scored)) if scored else 0.0
    generated = [sum(len(c.response_ids) for c in t.calls) for t in trajectories]
    return {
        f"{prefix}/reward_mean": mean,
        f"{prefix}/reward_std": std,
        f"{prefix}/success_rate": sum(succeeded(t) for t in trajectories if t.error is None) / n,
        f"{prefix}/madness_rate": sum(bool(t.madness) for t in trajectories) / n,
        f"{prefix}/error_rate": sum(t.error is not None for t in trajectories) / n,
        f"{prefix}/response_tokens_mean": sum(generated) / n,
        f"{prefix}/turns_mean": sum(len(t.calls) for t in trajectories) / n,
        **tool_metrics(trajectories, prefix),
        **agent_metrics(trajectories, prefix),
        **judge_metrics(trajectories, prefix),
    }


_JUDGE = "judge/"
_OF_AGENT = re.compile(r"agent/(?P<agent>[^/]+)/(?P<metric>.+)")


def judge_metrics(trajectories: Sequence[Trajectory], prefix: str) -> dict[str, float]:
    """The mean of each number in `Trajectory.metrics` (what the judge's `JudgeOutput.metrics` and
    the workflow's `WorkflowOutput.metrics` reported), under `<prefix>/judge/<name>`, or, for a
    number of one agent (named `agent/<agent>/<metric>`), under `<prefix>/agent/<agent>/judge/<metric>`
    beside that agent's own reward and calls (`agent_metrics`), and not also under `judge/`.

    Each mean is over the runs that finished (no `error`) and report that name, so a metric one
    kind of task reports is not diluted by the runs of the others. Bools count as 0/1; values
    that are not numbers, or not finite, are left out of the mean. A name the judge already
    wrote as `judge/<name>` keeps one `judge/`; a run reporting both `x` and `judge/x` counts
    once, with its `judge/x` (`judge/agent/wolf/x` is wolf's `x`, as `agent/wolf/x` is).
    """
    values: dict[str, list[float]] = {}
    for t in trajectories:
        if t.error is not None:
            continue
        reported: dict[str, float] = {}
        for name, value in sorted(t.metrics.items(), key=lambda item: item[0].startswith(_JUDGE)):
            number = _finite_number(value)
            if number is not None:
                reported[name.removeprefix(_JUDGE)] = number
        for name, number in reported.items():
            values.setdefault(name, []).append(number)
    return {_judge_key(prefix, name): sum(v) / len(v) for name, v in sorted(values.items())}


def _judge_key(prefix: str, name: str) -> str:
    """The step metric key of the judge's number `name` (its `judge/` taken off already)."""
    of_agent = _OF_AGENT.fullmatch(name)
    if of_agent is None:
        return f"{prefix}/{_JUDGE}{name}"
    return f"{prefix}/agent/{of_agent['agent']}/{_JUDGE}{of_agent['metric']}"


def _finite_number(value: object) -> float | None:
    """`value` as a float when it is a bool, int or float and finite; None otherwise."""
    if not isinstance(value, bool | int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def agent_metrics(trajectories: Sequence[Trajectory], prefix: str) -> dict[str, float]:
    """Per agent of a multi-agent workflow (more than one agent name, or per-agent rewards), under
    `<prefix>/agent/<name>/`: `reward_mean` (its own reward, over the runs the judge scored it in;
    a run with one reward for all is every agent's), `win_rate` (share of those runs where its
    reward was positive), `calls_mean` and `response_tokens_mean` per run. Empty for single-agent
    workflows."""
    names = sorted(
        {c.agent_name for t in trajectories for c in t.calls}
        | {a for t in trajectories for a in t.agent_rewards}
    )
    if len(names) < 2 and not any(t.agent_rewards for t in trajectories):
        return {}
    n = max(len(trajectories), 1)
    out: dict[str, float] = {}
    for name in names:
        rewards = [r for t in trajectories if (r := _agent_reward(t, name)) is not None]
        calls = [c for t in trajectories for c in t.calls if c.agent_name == name]
        key = f"{prefix}/agent/{name}"
        out[f"{key}/reward_mean"] = sum(rewards) / len(rewards) if rewards else 0.0
        out[f"{key}/win_rate"] = sum(r > 0 for r in rewards) / len(rewards) if rewards else 0.0
        out[f"{key}/calls_mean"] = len(calls) / n
        out[f"{key}/response_tokens_mean"] = sum(len(c.response_ids) for c in calls) / n
    return out


def _agent_reward(trajectory: Trajectory, name: str) -> float | None:
    """Agent `name`'s reward in `trajectory`: with per-agent rewards its own, None when the judge
    left it out (the run's reward is the scored agents' mean, not a score of this one); with one
    reward for the run (a scalar judge) that reward, every agent's. None for a failed or unscored run."""
    if trajectory.error is not None:
        return None
    if trajectory.agent_rewards:
        return trajectory.agent_rewards.get(name)
    return scalar_reward(trajectory)


def tool_metrics(trajectories: Sequence[Trajectory], prefix: str) -> dict[str, float]:
    """How the model used its tools, over the calls it generated for (`trainable` or not).

    A reply is a call that generated something (a stop reply with no tokens and no text is none).

    `tools_offered_rate`: replies to calls that offered tools / replies;
    `tool_calls_per_reply`: parsed tool calls / replies (a reply with two calls counts two);
    `replies_with_tool_call`: replies holding at least one parsed tool call / replies;
    `episodes_with_tool_call`: trajectories holding at least one parsed tool call / trajectories;
    `tool_parse_failure_rate`: replies whose tool call did not parse / replies;
    `tool_calls_parsed`: how many parsed tool calls the replies hold (a count, not a rate);
    `tool_parse_failures`: how many replies' tool call did not parse (a count);
    `tool_calls_executed`: parsed calls answered by a `tool` message in a
    later call of the same agent (the framework ran the tool; a count);
    `truncation_rate`: replies cut by the length budget / replies.
    Every rate is 0.0 when there is nothing to divide by.
    """
    replies = offered = parsed = calls = failures = executed = truncated = episodes = 0
    for t in trajectories:
        answered: dict[str, set[str]] = {}
        for call in t.calls:
            ids = answered.setdefault(call.agent_name, set())
            ids.update(str(m.get("tool_call_id")) for m in call.messages if m.get("role") == "tool")
        called = False
        for call in t.calls:
            if not call.response_ids and not call.text:
                continue  # a stop reply: nothing was generated
            replies += 1
            offered += bool(call.tools)
            parsed += bool(call.tool_calls)
            called = called or bool(call.tool_calls)
            calls += len(call.tool_calls)
            failures += call.tool_parse_error is not None
            truncated += call.finish_reason == "length"
            executed += sum(tc.id in answered[call.agent_name] for tc in call.tool_calls)
        episodes += called

    def share(count: int, total: int) -> float:
        return count / total if total else 0.0

    return {
        f"{prefix}/tools_offered_rate": share(offered, replies),
        f"{prefix}/tool_calls_per_reply": share(calls, replies),
        f"{prefix}/replies_with_tool_call": share(parsed, replies),
        f"{prefix}/episodes_with_tool_call": share(episodes, len(trajectories)),
        f"{prefix}/tool_parse_failure_rate": share(failures, replies),
        f"{prefix}/tool_calls_parsed": float(calls),
        f"{prefix}/tool_parse_failures": float(failures),
        f"{prefix}/tool_calls_executed": float(executed),
        f"{prefix}/truncation_rate": share(truncated, replies),
    }


def pass_at_k(trajectories: Sequence[Trajectory], k: int) -> float:
    """Unbiased pass@k averaged over tasks: 1 - C(n-c, k) / C(n, k) per task of n runs, c successes."""
    by_task: dict[str, list[bool]] = {}
    for t in trajectories:
        by_task.setdefault(t.group_id, []).append(t.error is None and succeeded(t))
    values = []
    for runs in by_task.values():
        n, c = len(runs), sum(runs)
        kk = min(k, n)
        values.append(1.0 - (math.comb(n - c, kk) / math.comb(n, kk) if n - c >= kk else 0.0))
    return sum(values) / len(values) if values else 0.0
