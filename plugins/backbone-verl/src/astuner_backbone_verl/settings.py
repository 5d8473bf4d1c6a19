"""The verl keys astuner gives its own defaults: written in the `verl:` block, checked before verl starts.

These settings concern verl alone, so they live in its verbatim block
under verl's own names; the tutorials' astuner spellings
(`rollout.max_num_seqs`, `rollout.name`, `trainer_common.fsdp_config`,
`trainer_common.algorithm.use_kl_in_reward`) are read as these keys by
`astuner.compat`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from astuner.training import AstunerConfig, engine_settings

ROLLOUT = "actor_rollout_ref.rollout"
FSDP = "actor_rollout_ref.actor.fsdp_config"


class VerlSettings(BaseModel):
    """astuner's defaults where verl's own would not suit an agent run; each field is a verl key."""

    rollout_name: str = Field("vllm", alias=f"{ROLLOUT}.name", description="verl's inference engine.")
    max_num_seqs: int = Field(
        10, ge=1, alias=f"{ROLLOUT}.max_num_seqs", description="Sequences one vLLM engine decodes at once."
    )
    param_offload: bool = Field(True, alias=f"{FSDP}.param_offload", description="FSDP parameters on CPU.")
    optimizer_offload: bool = Field(
        True, alias=f"{FSDP}.optimizer_offload", description="FSDP optimizer state on CPU."
    )
    use_kl_in_reward: bool = Field(
        False, alias="algorithm.use_kl_in_reward", description="A KL penalty in the reward (not the loss)."
    )


def verl_defaults(config: AstunerConfig) -> dict[str, Any]:
    """These keys as verl keys (dotted) -> value: the `verl:` block's, else astuner's default."""
    return engine_settings(VerlSettings, config.verl, "verl").model_dump(by_alias=True)
