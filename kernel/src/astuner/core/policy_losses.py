"""The built-in policy losses: pure functions of per-token tensors, no model, no config.

Every loss has the signature of `register_policy_losses` (hookspecs):

    loss(logprobs, old_logprobs, advantages, mask, settings) -> (per_token_loss, clipped)

- `logprobs`: `(B, T)` log-probs of the sampled tokens under the policy
  being trained (with gradient);
- `old_logprobs`: `(B, T)` those under the policy that sampled them (no
  gradient);
- `advantages`: `(B, T)` each token's advantage;
- `mask`: `(B, T)` 1.0 on tokens that carry loss (generated ones), 0.0 on
  prompt, tool output and padding;
- `settings`: an `astuner.training.PolicyLossSettings` (`clip_low`,
  `clip_high`, `options`).

Both results are `(B, T)`: the loss of each token, which the trainer
aggregates over the step's masked tokens (`trainer_common.loss_agg_mode`),
and `clipped`, 1.0 where the clip changed the token's gradient (its masked
mean is reported as `actor/clip_frac`). Values at masked-out positions are
whatever the formula gives there; the trainer never reads them.

The module calls only tensor methods, so importing it does not load torch
(the kernel does not depend on torch; the registering plugin imports this
module lazily anyway). Log-ratios are clamped to [-20, 20] before `exp`: one
token whose log-prob moved that far (a ratio of 5e8) would otherwise
overflow a step's loss to inf.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from torch import Tensor

# |log pi - log pi_old| beyond this is a wild token, not a policy update: kept finite.
MAX_LOG_RATIO = 20.0


class ClipSettings(Protocol):
    """What the losses read of `astuner.training.PolicyLossSettings`."""

    @property
    def clip_low(self) -> float: ...

    @property
    def clip_high(self) -> float: ...


def _clipped_surrogate(ratio: Tensor, advantages: Tensor, settings: ClipSettings) -> tuple[Tensor, Tensor]:
    """`-min(r A, clip(r, 1 - low, 1 + high) A)` per token, and 1.0 where the clipped term was taken.

    ratio, advantages: `(B, T)`; both results `(B, T)`. Where the clipped
    term is taken its ratio is a constant, so the token has no gradient.
    """
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - settings.clip_low, 1.0 + settings.clip_high)
    return unclipped.maximum(clipped), (clipped > unclipped).float()


def _token_ratio(logprobs: Tensor, old_logprobs: Tensor) -> Tensor:
    """`pi / pi_old` per token, `(B, T)`, from a clamped log-ratio."""
    return (logprobs - old_logprobs).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO).exp()


def ppo_clip_loss(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, settings: ClipSettings
) -> tuple[Tensor, Tensor]:
    """PPO's clipped surrogate per token (Schulman et al. 2017).

    `loss = -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A)` with
    `r = exp(logprobs - old_logprobs)`; `clipped` = 1.0 where the clipped
    term was the one taken (no gradient there). All tensors `(B, T)`;
    `mask` is not needed: each token's loss is its own.
    """
    return _clipped_surrogate(_token_ratio(logprobs, old_logprobs), advantages, settings)


def dapo_loss(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, settings: ClipSettings
) -> tuple[Tensor, Tensor]:
    """DAPO's decoupled clip-higher surrogate per token (Yu et al. 2025, arXiv 2503.14476).

    The PPO clip with its two sides set apart: a ratio may rise to
    `1 + clip_high` (DAPO: 0.28) on a positive advantage but fall only to
    `1 - clip_low` (0.2) on a negative one, so tokens the policy finds
    unlikely can still gain probability and exploration does not collapse.
    DAPO averages the loss over every token of the step rather than per
    sequence (`token-mean`), so long replies weigh by their length; both
    values are the defaults its registration declares, the trainer
    aggregates. All tensors `(B, T)`; `mask` unused, as for PPO.
    """
    return _clipped_surrogate(_token_ratio(logprobs, old_logprobs), advantages, settings)


def gspo_loss(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, settings: ClipSettings
) -> tuple[Tensor, Tensor]:
    """GSPO's sequence-level clipped surrogate, in its per-token form (Zheng et al. 2025, arXiv 2507.18071).

    The importance ratio is the sequence's, length-normalised:
    `s_i = exp(mean over the masked tokens t of (logprobs - old_logprobs))`,
    the geometric mean of the token ratios, so one unlikely token does not
    make the whole ratio explode and every token of a sequence is clipped or
    not together. Per token, `log s_i,t = sg[log s_i] + logprobs - sg[logprobs]`
    (sg: stop-gradient): its value is `s_i` at every token of row i, its
    gradient that of `logprobs` scaled by `s_i`; the token's loss is
    `-min(s_i,t A, clip(s_i,t, 1 - clip_low, 1 + clip_high) A)`. Averaged
    per sequence (`seq-mean-token-mean`, the default its registration
    declares) this is GSPO's objective and gradient. The paper's clip range
    is tiny (3e-4 / 4e-4) because `s_i` stays near 1.

    All tensors `(B, T)`; padding (mask 0) does not enter `s_i`; a row
    without masked tokens gets `s_i = 1`.
    """
    token_log_ratio = (logprobs - old_logprobs) * mask
    lengths = mask.sum(-1, keepdim=True).clamp(min=1.0)
    sequence_log_ratio = (token_log_ratio.sum(-1, keepdim=True) / lengths).detach()
    sequence_log_ratio = sequence_log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    # `logprobs - sg[logprobs]` first: it is exactly 0, so every token's value is `log s_i` to the last bit.
    # Adding `log s_i` (~1e-4) to a log-prob (~-17) first rounds it by ~1e-6, per token: near GSPO's
    # 4e-4 ceiling one token of a sequence would be clipped and the next not.
    ratio = (logprobs - logprobs.detach() + sequence_log_ratio).exp()
    return _clipped_surrogate(ratio, advantages, settings)


def cispo_loss(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, settings: ClipSettings
) -> tuple[Tensor, Tensor]:
    """CISPO: clipped, stop-gradient importance weights on every token (MiniMax-M1, arXiv 2506.13585).

    `loss = -sg(clip(r, 1 - clip_low, 1 + clip_high)) * A * logprobs` with
    `r = exp(logprobs - old_logprobs)`: a REINFORCE gradient `-w A` per token
    whose weight `w` is the truncated importance ratio. Unlike PPO's clip,
    which drops a token's gradient once its ratio leaves the range, CISPO
    only caps its weight, so the rare tokens that fork a reasoning path
    (which move most) keep contributing. `clipped` = 1.0 where `r` was outside
    the range (the weight was capped). Its registration declares
    `clip_low` 1.0 (no lower bound on `w`) and `clip_high` 0.28.
    All tensors `(B, T)`; `mask` unused.
    """
    ratio = _token_ratio(logprobs, old_logprobs).detach()
    low, high = 1.0 - settings.clip_low, 1.0 + settings.clip_high
    weight = ratio.clamp(low, high)
    outside = (ratio < low) | (ratio > high)
    return -weight * advantages * logprobs, outside.float()
