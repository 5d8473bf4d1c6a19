"""The built-in step metrics: what the kernel's scoring, the torch backbone and `astuner eval` write.

Each key here is a `metrics.jsonl` name (`{split}`: train, val, eval; see
`astuner.core.metric_catalog`). The health rules are the checks a run warns
of: each threshold with the sentence that says what crossing it means and
what to do. The default plugin `astuner.default_plugins.metrics` declares
them through `register_metrics`, as a plugin that writes metrics of its own
declares those; `builtin_catalog()` is these alone, for the health checks of
a caller that has no plugins at hand. They live in the core, beside the
scoring that writes most of them, so the core's health checks can read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING

from astuner.core.metric_catalog import HealthRule, MetricCatalog, collect_metrics

if TYPE_CHECKING:
    from astuner.hookspecs import RegisterMetric


def _offered_tools(m: Mapping[str, float]) -> bool:
    return m.get("tools_offered_rate", 0.0) > 0


def _failures_not_fewer_than_calls(m: Mapping[str, float]) -> bool:
    return m.get("tool_parse_failures", 0.0) >= m.get("tool_calls_parsed", 0.0)


def _episodes_split(m: Mapping[str, float]) -> bool:
    return m.get("samples_per_episode", 0.0) > 2


def _no_rollout_gap(m: Mapping[str, float]) -> bool:
    return "rollout_logprob_gap" not in m


NO_TOOL_CALLS = HealthRule(
    "no_tool_calls",
    "the agent offered tools in {tools_offered_rate:.0%} of the model calls, but the model called "
    "none. Check that the tools reach the model (the 'tool format' line at the start of the run; "
    "model.tool_format) and consider a model.tool_demonstration for a small model.",
    at_most=0.0,
    when=_offered_tools,
)
TOOL_PARSE_FAILURES = HealthRule(
    "tool_parse_failures",
    "{tool_parse_failures:.0f} replies tried to call a tool but could not be parsed, as many as or "
    "more than the calls that parsed: the model writes the call format wrongly (see "
    "tool_parse_error in the records), or context_tracker.tool_parser does not match the model.",
    at_least=1.0,
    when=_failures_not_fewer_than_calls,
)
TOOL_PARSE_FAILURE_RATE = HealthRule(
    "tool_parse_failure_rate",
    "{tool_parse_failure_rate:.0%} of the replies held a tool call that could not be parsed "
    "({tool_parse_failures:.0f} this step): those turns get no tool result and usually no reward. "
    "See tool_parse_error in the records; check that context_tracker.tool_parser matches the "
    "model's call format, or show the model the format (model.tool_demonstration).",
    at_least=0.05,
)
ZERO_ADVANTAGE_GROUPS = HealthRule(
    "zero_advantage_groups",
    "{zero_adv_group_frac:.0%} of the task groups gave every rollout the same reward, so they carry "
    "no learning signal: the tasks are too hard or too easy for the model, or the judge only "
    "gives a few distinct rewards. Raise rollout.num_repeat or change the task mix.",
    at_least=0.8,
)
TRUNCATION = HealthRule(
    "truncation",
    "{truncation_rate:.0%} of the replies were cut by rollout.max_response_length_in_one_turn; cut "
    "replies rarely get a reward. Raise the budget or ask for shorter answers.",
    at_least=0.2,
)
PREFIX_BREAKS = HealthRule(
    "prefix_breaks",
    "{prefix_breaks:.0f} model calls did not extend the conversation before them (an edited "
    "history), so episodes became {samples_per_episode:.1f} samples each and shared prefixes are "
    "re-encoded. The viewer marks each break with its reason.",
    at_least=1.0,
    when=_episodes_split,
)
LOGPROB_GAP = HealthRule(
    "logprob_gap",
    "the trainer's log-probs differ from the engine's on the same tokens by {logprob_gap:.3f} on "
    "average: the engine samples from other weights or another dtype than the trainer trains, so "
    "the update is off-policy. Check the weight sync and the dtypes of engine and trainer.",
    at_least=0.1,
    when=_no_rollout_gap,
)
ROLLOUT_LOGPROB_GAP = HealthRule(
    "rollout_logprob_gap",
    "before the update, the trainer's log-probs differ from the engine's on the same tokens by "
    "{rollout_logprob_gap:.3f} on average (estimated KL {rollout_kl:.3f}): the engine samples from "
    "other weights or another dtype than the trainer trains, so the update is off-policy. Check "
    "the weight sync (each call's policy_version) and the dtypes of engine and trainer, or "
    "correct for it with trainer_common.algorithm.rollout_correction.rollout_is.",
    at_least=0.1,
)


def _rollouts(register: RegisterMetric) -> None:
    """What `astuner.core.metrics.rollout_metrics` writes for every split."""
    group = "reward"
    register(
        "{split}/reward_mean",
        label="mean judge reward",
        description="Mean reward of the scored trajectories (failed ones left out).",
        good="up",
        console=True,
        group=group,
    )
    register(
        "{split}/reward_std",
        label="reward (std)",
        description="Spread of the rewards: with none, groups carry no learning signal.",
        group=group,
    )
    register(
        "{split}/success_rate",
        label="success rate",
        description="Share of trajectories the judge counted a success (else: a positive reward).",
        good="up",
        console=True,
        group=group,
    )
    register(
        "{split}/pass@{name}",
        label="pass@{name}",
        description="Chance that at least one of k runs of a task succeeds, averaged over tasks.",
        good="up",
        console=True,
        group=group,
    )
    group = "rollout"
    register(
        "{split}/madness_rate",
        label="madness rate",
        description="Share of trajectories a madness check flagged (repetition, garbage, ...).",
        good="down",
        group=group,
    )
    register(
        "{split}/error_rate",
        label="error rate",
        description="Share of trajectories whose workflow or judge failed.",
        good="down",
        group=group,
    )
    register(
        "{split}/response_tokens_mean",
        label="response tokens per episode",
        description="Tokens the model generated per trajectory, over all its calls.",
        unit="tokens",
        console=True,
        group=group,
    )
    register(
        "{split}/turns_mean",
        label="model calls per episode",
        description="Model calls per trajectory.",
        unit="calls",
        group=group,
    )
    register(
        "{split}/truncation_rate",
        label="truncated replies",
        description="Share of replies cut by the length budget.",
        good="down",
        health=TRUNCATION,
        group=group,
    )
    register(
        "rollout/prompt_tokens_reused_frac",
        label="prompt tokens reused",
        description="Share of prompt tokens the in-process engine took from its prefix cache.",
        good="up",
        group=group,
    )


def _tools(register: RegisterMetric) -> None:
    """Tool use, over the replies that generated something (`astuner.core.metrics.tool_metrics`)."""
    group = "tools"
    register(
        "{split}/tools_offered_rate",
        label="replies offered tools",
        description="Share of replies to calls that offered the model tools.",
        group=group,
    )
    register(
        "{split}/tool_calls_per_reply",
        label="tool calls per reply",
        description="Parsed tool calls per reply (a reply may hold several).",
        unit="calls",
        console=True,
        group=group,
    )
    register(
        "{split}/replies_with_tool_call",
        label="replies with a tool call",
        description="Share of replies holding at least one parsed tool call.",
        health=NO_TOOL_CALLS,
        group=group,
    )
    register(
        "{split}/episodes_with_tool_call",
        label="episodes with a tool call",
        description="Share of trajectories with at least one parsed tool call.",
        group=group,
    )
    register(
        "{split}/tool_calls_parsed",
        label="tool calls parsed",
        description="Tool calls parsed from the replies.",
        unit="calls",
        group=group,
    )
    register(
        "{split}/tool_parse_failures",
        label="tool call parse failures",
        description="Replies whose tool call could not be parsed.",
        unit="replies",
        good="down",
        health=TOOL_PARSE_FAILURES,
        console=True,
        group=group,
    )
    register(
        "{split}/tool_parse_failure_rate",
        label="tool call parse failure rate",
        description="Share of replies whose tool call could not be parsed.",
        good="down",
        health=TOOL_PARSE_FAILURE_RATE,
        group=group,
    )
    register(
        "{split}/tool_calls_executed",
        label="tool calls executed",
        description="Parsed calls a later call of the same agent answered with a tool message.",
        unit="calls",
        group=group,
    )


def _agents_and_judges(register: RegisterMetric) -> None:
    """Per agent of a multi-agent workflow, and each number a judge reports.

    Each agent's metrics, those the judge reports of it (`agent/<agent>/<metric>`
    in `JudgeOutput.metrics`) included, are one chart section per agent,
    "agent: <name>": what a role's training changes is read off one section,
    each role beside its own numbers rather than interleaved with the others'.
    """
    group = "agent: {name}"
    register(
        "{split}/agent/{name}/reward_mean",
        label="{name}: mean judge reward",
        description="The agent's own reward, over the runs the judge scored it in.",
        good="up",
        console=True,
        group=group,
    )
    register(
        "{split}/agent/{name}/win_rate",
        label="{name}: win rate",
        description="Share of the agent's scored runs where its reward was positive.",
        good="up",
        console=True,
        group=group,
    )
    register(
        "{split}/agent/{name}/calls_mean",
        label="{name}: model calls per episode",
        description="The agent's model calls per trajectory.",
        unit="calls",
        group=group,
    )
    register(
        "{split}/agent/{name}/response_tokens_mean",
        label="{name}: response tokens per episode",
        description="Tokens the agent generated per trajectory.",
        unit="tokens",
        group=group,
    )
    register(
        "{split}/agent/{name}/judge/{metric}",
        label="{name}: {metric}",
        description="A number the judge (or the workflow) reported of this agent as "
        "`agent/<agent>/<metric>`, averaged over the trajectories that reported it.",
        group=group,
    )
    register(
        "{split}/judge/{name}",
        label="{name}",
        description="A number the judge (or the workflow) reported, averaged over the trajectories "
        "that reported it.",
        group="judge",
    )


def _samples(register: RegisterMetric) -> None:
    """What a training step made of its trajectories (the torch backbone's merge and advantages)."""
    group = "samples"
    register(
        "train/zero_adv_group_frac",
        label="groups without learning signal",
        description="Share of task groups whose rollouts all got the same reward (zero advantages).",
        good="down",
        health=ZERO_ADVANTAGE_GROUPS,
        group=group,
    )
    register("train/samples", label="samples", description="Training samples of the step.", group=group)
    register(
        "train/calls_merged",
        label="model calls merged",
        description="Model calls merged into the step's samples.",
        unit="calls",
        group=group,
    )
    register(
        "train/merge_ratio",
        label="merge ratio",
        description="How many fewer samples than model calls merging made (shared prefixes).",
        good="up",
        group=group,
    )
    register(
        "train/samples_per_episode",
        label="samples per episode",
        description="Samples per trajectory: 1 when every call extends the conversation before it.",
        group=group,
    )
    register(
        "train/trained_tokens",
        label="trained tokens",
        description="Generated tokens the step trains on.",
        unit="tokens",
        group=group,
    )
    register(
        "train/drifts",
        label="retokenization drifts",
        description="Calls whose prompt tokens differ from the conversation's own tokenization.",
        good="down",
        group=group,
    )
    register(
        "train/prefix_breaks",
        label="prefix breaks",
        description="Model calls that did not extend the conversation before them.",
        good="down",
        health=PREFIX_BREAKS,
        group=group,
    )
    register(
        "train/prefix_breaks/{name}",
        label="prefix breaks: {name}",
        description="Prefix breaks for this reason.",
        good="down",
        group=group,
    )


_ACTOR: tuple[tuple[str, str, str, str, str | None], ...] = (
    # (name, label, description, unit, good)
    ("loss", "loss", "The step's training loss (policy loss plus KL).", "", None),
    ("pg_loss", "policy loss", "Mean per-token policy-gradient loss.", "", None),
    ("kl", "KL to the reference", "Mean per-token KL penalty against the reference model.", "", None),
    ("grad_norm", "gradient norm", "Largest gradient norm of the step's optimizer steps.", "", None),
    ("lr", "learning rate", "The learning rate the step ran at.", "", None),
    (
        "clip_frac",
        "clipped tokens",
        "Share of trained tokens where the policy loss's clip acted (PPO, DAPO, GSPO: the gradient was "
        "taken away; CISPO: the importance weight was capped).",
        "",
        None,
    ),
    ("entropy", "entropy", "Mean per-token entropy of the policy.", "nats", None),
    ("nll", "negative log-likelihood", "Mean per-token negative log-likelihood.", "nats", "down"),
    (
        "logprob_gap",
        "log-prob gap (update)",
        "Mean absolute gap between the trainer's log-probs and the ratio's old ones.",
        "nats",
        "down",
    ),
    (
        "rollout_logprob_gap",
        "log-prob gap to the engine",
        "Mean absolute gap between the trainer's and the engine's log-probs before the update. With "
        "asynchronous rollouts (trainer_common.max_staleness > 0): over the tokens sampled by the "
        "weights the update starts from only (the stale ones: rollout_logprob_gap/stale_<k>), so a "
        "large gap still points at the weight sync or the dtypes.",
        "nats",
        "down",
    ),
    (
        "rollout_logprob_gap_max",
        "largest log-prob gap to the engine",
        "Largest per-token gap between the trainer's and the engine's log-probs (with "
        "trainer_common.max_staleness > 0: on the fresh tokens only, as rollout_logprob_gap).",
        "nats",
        "down",
    ),
    (
        "rollout_kl",
        "KL engine to trainer",
        "Estimated KL(engine || trainer) per token (with trainer_common.max_staleness > 0: on the "
        "fresh tokens only, as rollout_logprob_gap).",
        "nats",
        "down",
    ),
    ("rollout_is_weight", "rollout IS weight", "Mean truncated importance weight per token.", "", None),
    (
        "rollout_is_capped_frac",
        "capped IS weights",
        "Share of tokens whose importance weight hit the cap.",
        "",
        "down",
    ),
    ("tokens_trained", "tokens trained", "Tokens the update trained on.", "tokens", None),
    ("micro_batches", "micro-batches", "Forward and backward passes of the step.", "", None),
    ("padded_tokens", "padded tokens", "Tokens in the micro-batches, padding included.", "tokens", None),
    ("real_tokens", "real tokens", "Tokens in the micro-batches, padding left out.", "tokens", None),
    ("skipped_samples", "skipped samples", "Samples left out (too long, nothing to train).", "", "down"),
    ("skipped_updates", "skipped updates", "Optimizer steps skipped (loss not finite).", "", "down"),
    (
        "samples_without_adapter",
        "samples without adapter",
        "Samples of agents that train no adapter.",
        "",
        None,
    ),
)
_ACTOR_CONSOLE = {"loss", "kl", "grad_norm", "clip_frac"}
_ACTOR_HEALTH = {"logprob_gap": LOGPROB_GAP, "rollout_logprob_gap": ROLLOUT_LOGPROB_GAP}


def _actor(register: RegisterMetric) -> None:
    """What the torch trainer's update reports (`actor/`), per adapter (`actor/<agent>/`), and in sft."""
    for name, label, description, unit, good in _ACTOR:
        register(
            f"actor/{name}",
            label=label,
            description=description,
            unit=unit,
            good=good,
            health=_ACTOR_HEALTH.get(name),
            console=name in _ACTOR_CONSOLE,
            group="actor",
        )
        register(
            f"actor/{{name}}/{name}",
            label=f"{{name}}: {label}",
            description=f"{description} Of this agent's adapter.",
            unit=unit,
            good=good,
            console=name in _ACTOR_CONSOLE,
            group="actor",
        )
        register(
            f"sft/{name}",
            label=label,
            description=f"{description} (supervised fine-tuning)",
            unit=unit,
            good=good,
            group="sft",
        )
    register(
        "actor/rollout_logprob_gap/stale_{name}",
        label="log-prob gap to the engine, {name} updates stale",
        description="Mean absolute gap between the trainer's and the engine's log-probs before the update, "
        "over the tokens of calls sampled this many updates before (asynchronous rollouts, "
        "trainer_common.max_staleness): the gap stale samples add, which the importance weights correct.",
        unit="nats",
        group="async",
    )


def _async(register: RegisterMetric) -> None:
    """How old the weights that sampled a step's calls were (asynchronous rollouts of backbone torch)."""
    group = "async"
    register(
        "async/staleness_mean",
        label="mean staleness",
        description="Updates between the weights that sampled a call and those the step trains from, "
        "averaged over the step's calls (at most trainer_common.max_staleness).",
        unit="updates",
        group=group,
    )
    register(
        "async/staleness_max",
        label="largest staleness",
        description="The oldest call of the step, in updates behind the weights it trains from.",
        unit="updates",
        group=group,
    )
    register(
        "async/calls_stale_{name}",
        label="calls {name} updates stale",
        description="Share of the step's calls sampled by weights this many updates old.",
        group=group,
    )


_TIMING = (
    (
        "rollout_s",
        "rollout time",
        "Seconds the step's rollouts took. With trainer_common.max_staleness > 0 the span of the step's "
        "batch, launch to last trajectory, which overlapped the updates of earlier steps: the timings "
        "of a step then do not add up to step_s (timing/wait_rollout_s is what the step waited).",
    ),
    ("update_s", "update time", "Seconds the update took."),
    ("sync_s", "weight sync time", "Seconds the engine took to take the new weights."),
    (
        "wait_rollout_s",
        "waiting for rollouts",
        "Seconds the trainer waited for the step's rollouts (asynchronous rollouts: those still running "
        "when the step began).",
    ),
    (
        "wait_weights_s",
        "rollouts waiting for weights",
        "Seconds of the update and weight sync in which every rollout trainer_common.max_staleness let "
        "start had ended: generation idle, waiting for newer weights.",
    ),
    ("val_s", "validation time", "Seconds the validation took."),
    ("save_s", "checkpoint time", "Seconds saving the checkpoint took."),
    ("step_s", "step time", "Seconds the whole step took."),
)


def _timing(register: RegisterMetric) -> None:
    for name, label, description in _TIMING:
        register(
            f"timing/{name}",
            label=label,
            description=description,
            unit="s",
            good="down",
            console=name == "step_s",
            group="timing",
        )


def declare_builtin_metrics(register: RegisterMetric) -> None:
    """Declare the kernel's and the torch backbone's metrics (a `register_metrics` hook's body)."""
    _rollouts(register)
    _tools(register)
    _agents_and_judges(register)
    _samples(register)
    _actor(register)
    _async(register)
    _timing(register)


@cache
def builtin_catalog() -> MetricCatalog:
    """The built-in declarations alone (the catalog of a run also has its plugins')."""
    return collect_metrics([("metrics", declare_builtin_metrics)])
