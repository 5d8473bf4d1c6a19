"""The built-in advantage estimators and policy losses, registered through the hooks a plugin uses.

Estimators (`trainer_common.algorithm.adv_estimator`; math in
`astuner.core.advantages`): grpo (alias multi_step_grpo, AgentScope's name:
the prefix merge makes an episode one sample, so its per-call GRPO is
trajectory-level grpo), dr_grpo, rloo, reinforce_pp, reinforce_pp_baseline.
Losses (`trainer_common.algorithm.policy_loss`; math in
`astuner.core.policy_losses`): ppo_clip (aliases vanilla, ppo), dapo, gspo,
cispo, each with the clip range and aggregation its paper uses as `defaults`.

Counterparts: verl's `(algorithm.adv_estimator,
algorithm.norm_adv_by_std_in_grpo)` and `actor_rollout_ref.actor.policy_loss.loss_mode`;
Trinity's `algorithm.algorithm_type` and `algorithm.policy_loss_fn`. Trinity's
multi_step_grpo groups every experience of a task's runs, which fits
episodes that merge into more than one sample. DAPO's clip-higher is verl's
and Trinity's PPO loss with DAPO's clip values, which the translation sets.

Factories import the math when a run builds them: numpy for estimators,
torch for losses, neither when plugins are listed or a config translated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from astuner.hookspecs import Register, hookimpl

if TYPE_CHECKING:
    from astuner.algorithms import PolicyLoss
    from astuner.core.advantages import Estimator


def _estimator(name: str) -> Estimator:
    from astuner.core import advantages

    fn: Estimator = getattr(advantages, name)
    return fn


def _loss(name: str) -> PolicyLoss:
    from astuner.core import policy_losses

    fn: PolicyLoss = getattr(policy_losses, f"{name}_loss")
    return fn


@hookimpl
def register_advantage_estimators(register: Register) -> None:
    register(
        "grpo",
        lambda: _estimator("grpo"),
        summary="GRPO: score minus the group mean, over the group's standard deviation",
        aliases=("multi_step_grpo",),
        counterparts={"verl": ("grpo", True), "trinity": "multi_step_grpo"},
    )
    register(
        "dr_grpo",
        lambda: _estimator("dr_grpo"),
        summary="Dr. GRPO: score minus the group mean, not divided",
        counterparts={"verl": ("grpo", False)},
    )
    register(
        "rloo",
        lambda: _estimator("rloo"),
        summary="RLOO: score minus the mean of the group's other scores",
        counterparts={"verl": ("rloo", True), "trinity": "rloo"},
    )
    register(
        "reinforce_pp",
        lambda: _estimator("reinforce_pp"),
        summary="REINFORCE++: scores whitened over the whole batch",
        counterparts={"verl": ("reinforce_plus_plus", True)},
    )
    register(
        "reinforce_pp_baseline",
        lambda: _estimator("reinforce_pp_baseline"),
        summary="REINFORCE++ with a group baseline: centred per group, scaled over the batch",
    )


@hookimpl
def register_policy_losses(register: Register) -> None:
    register(
        "ppo_clip",
        lambda: _loss("ppo_clip"),
        summary="PPO's clipped surrogate per token",
        aliases=("vanilla", "ppo"),
        defaults={"clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "loss_agg_mode": "token-mean"},
        counterparts={"verl": "vanilla", "trinity": "ppo"},
    )
    register(
        "dapo",
        lambda: _loss("dapo"),
        summary="DAPO: PPO clip with a higher ceiling (clip-higher), token-level mean",
        defaults={"clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "loss_agg_mode": "token-mean"},
        counterparts={"verl": "vanilla", "trinity": "ppo"},
    )
    register(
        "gspo",
        lambda: _loss("gspo"),
        summary="GSPO: one length-normalised importance ratio per sequence, clipped",
        defaults={"clip_ratio_low": 3e-4, "clip_ratio_high": 4e-4, "loss_agg_mode": "seq-mean-token-mean"},
        counterparts={"verl": "gspo", "trinity": "gspo"},
    )
    register(
        "cispo",
        lambda: _loss("cispo"),
        summary="CISPO: clipped, stop-gradient importance weights on every token's log-prob",
        defaults={"clip_ratio_low": 1.0, "clip_ratio_high": 0.28, "loss_agg_mode": "token-mean"},
        counterparts={"verl": "cispo", "trinity": "cispo"},
    )
