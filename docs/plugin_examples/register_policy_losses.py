"""A policy loss `reinforce`: plain policy gradient, `-scale * A * log p` per token, no ratio, no clip.

Chosen with `trainer_common.algorithm.policy_loss: reinforce`. The block
`trainer_common.algorithm.policy_loss_args` is checked against
`ReinforceArgs` and reaches the loss as `settings.options`; `defaults` sets
the aggregation when the config leaves `trainer_common.loss_agg_mode` unset.
The factory returns the function; a loss that needs `import torch` does it
in the factory, so the plugin imports cheaply.
"""

from typing import Any

from pydantic import BaseModel

from astuner.api import Register, hookimpl


class ReinforceArgs(BaseModel):
    scale: float = 1.0


def reinforce(logprobs: Any, old_logprobs: Any, advantages: Any, mask: Any, settings: Any) -> tuple[Any, Any]:
    """All tensors `(B, T)`. Returns the per-token loss and, as nothing is clipped, zeros."""
    loss = -settings.options.scale * advantages * logprobs
    return loss, advantages.new_zeros(advantages.shape)


@hookimpl
def register_policy_losses(register: Register) -> None:
    register(
        "reinforce",
        lambda: reinforce,
        settings=ReinforceArgs,
        defaults={"loss_agg_mode": "seq-mean-token-mean"},
        summary="Policy gradient without a ratio or clip.",
    )
