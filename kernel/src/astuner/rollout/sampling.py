"""The one place sampling settings are built from the config.

Every rollout's `SamplingParams` starts here: training rollouts
(`rollout.temperature`, `top_p`, `top_k`, `max_response_length_in_one_turn`),
validation (`rollout.val_kwargs`, greedy unless `do_sample`) and each
auxiliary model (`auxiliary_models.<name>.*`). A backbone whose own engine
has its own sampling keys (verl, Trinity) and an evaluation at another
temperature start from these and change them with `SamplingParams.override`,
as a workflow's model call does. What each call was really sampled with is
recorded on it (`LLMCall.sampling`), and the torch trainer computes its
log-probs at that temperature.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from astuner.rollout.engine import SamplingParams

if TYPE_CHECKING:
    from astuner.config_sections import AuxiliaryModelConfig, RolloutConfig


def sampling_from_config(rollout: RolloutConfig, validation: bool = False) -> SamplingParams:
    """Training-time sampling of the `rollout` block (`config.rollout`), or for validation its
    greedy-by-default `val_kwargs`.

    It takes the rollout block alone, never the whole config: a backbone passes `config.rollout`.
    """
    if validation:
        v = rollout.val_kwargs
        temperature = v.temperature if v.do_sample else 0.0
        return SamplingParams(temperature, v.top_p, v.top_k, rollout.max_response_length_in_one_turn)
    return SamplingParams(
        rollout.temperature, rollout.top_p, rollout.top_k, rollout.max_response_length_in_one_turn
    )


def auxiliary_sampling(spec: AuxiliaryModelConfig) -> SamplingParams:
    """The sampling of an auxiliary model, from its `auxiliary_models.<name>` entry."""
    return SamplingParams(spec.temperature, spec.top_p, spec.top_k, spec.max_tokens)
