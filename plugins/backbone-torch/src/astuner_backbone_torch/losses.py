"""The loss math of the trainer: pure tensor functions, no model, no config.

Shapes: `B` sequences (rows of a micro-batch), `T` target positions per
row. Every per-token tensor is `(B, T)`; `mask` is 1.0 on tokens that carry
loss (tokens the policy generated) and 0.0 elsewhere (prompt, tool output,
padding).

Aggregation is normalised by the whole step, not the micro-batch: a step's
samples are split into micro-batches by token budget, and each micro-batch
contributes `sum(...) / norm` with `norm` counted over all of the step's
samples, so the accumulated gradient is the same however the samples were
split (and however many calls a merged sample holds).

`KL_ESTIMATORS` maps `trainer_common.kl_loss_type`'s names to their
functions; `AGG_MODES` lists `trainer_common.loss_agg_mode`'s values. The
policy losses are not here: they are algorithms a plugin may register
(`register_policy_losses`; the built-in ones in the kernel's
`astuner.core.policy_losses`), chosen by `trainer_common.algorithm.policy_loss`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

KlEstimator = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
KL_ESTIMATORS: dict[str, KlEstimator] = {}
AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


def _kl(name: str) -> Callable[[KlEstimator], KlEstimator]:
    def deco(fn: KlEstimator) -> KlEstimator:
        KL_ESTIMATORS[name] = fn
        return fn

    return deco


@_kl("kl")
def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k1 = log p - log q per token, `(B, T)` -> `(B, T)`: unbiased, high variance, can be negative."""
    return logprobs - ref_logprobs


@_kl("abs")
def kl_abs(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """|log p - log q| per token, `(B, T)` -> `(B, T)`."""
    return (logprobs - ref_logprobs).abs()


@_kl("mse")
def kl_k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k2 = (log p - log q)^2 / 2 per token, `(B, T)` -> `(B, T)`."""
    return 0.5 * (logprobs - ref_logprobs).square()


@_kl("low_var_kl")
def kl_low_var(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 = exp(q - p) - (q - p) - 1 >= 0 per token, clamped to [-10, 10]; `(B, T)` -> `(B, T)`.

    Unbiased for KL(p || q) under samples from p, low variance, never
    negative; the clamp keeps one wild token from dominating a step.
    """
    delta = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    return (delta.exp() - delta - 1.0).clamp(-10.0, 10.0)


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str) -> torch.Tensor:
    """The per-token KL estimate named `kind` (a key of `KL_ESTIMATORS`)."""
    try:
        return KL_ESTIMATORS[kind](logprobs, ref_logprobs)
    except KeyError:
        raise ValueError(f"unknown kl_loss_type {kind!r}; known: {sorted(KL_ESTIMATORS)}") from None


@dataclass(frozen=True)
class StepNorm:
    """What a whole step's aggregation divides by: its trained tokens and its sequences."""

    tokens: float
    sequences: float


def step_norm(masks: list[torch.Tensor]) -> StepNorm:
    """Normaliser of a step from the `(B_i, T_i)` masks of all its micro-batches."""
    tokens = sum(float(m.sum()) for m in masks)
    sequences = sum(float((m.sum(-1) > 0).sum()) for m in masks)
    return StepNorm(max(tokens, 1.0), max(sequences, 1.0))


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, mode: str, norm: StepNorm) -> torch.Tensor:
    """Reduce a `(B, T)` per-token loss to this micro-batch's share of the step loss (a scalar).

    - `token-mean`: sum over all trained tokens / all trained tokens of the step.
      Every generated token weighs the same, so merging calls into one
      sample does not change the objective.
    - `seq-mean-token-mean`: mean over each sequence's tokens, summed over
      sequences / the step's sequences.
    - `seq-mean-token-sum`: sum over each sequence's tokens, summed over
      sequences / the step's sequences.
    """
    masked = per_token * mask
    if mode == "token-mean":
        return masked.sum() / norm.tokens
    per_seq = masked.sum(-1)
    if mode == "seq-mean-token-mean":
        per_seq = per_seq / mask.sum(-1).clamp(min=1.0)
    elif mode != "seq-mean-token-sum":
        raise ValueError(f"unknown loss_agg_mode {mode!r}; known: {', '.join(AGG_MODES)}")
    return per_seq.sum() / norm.sequences


def token_nll(logprobs: torch.Tensor) -> torch.Tensor:
    """Negative log-likelihood per token, `(B, T)` -> `(B, T)`: the supervised fine-tuning loss."""
    return -logprobs


def rollout_is_weights(
    trainer_logprobs: torch.Tensor,
    engine_logprobs: torch.Tensor,
    mask: torch.Tensor,
    level: str = "token",
    threshold: float = 2.0,
) -> torch.Tensor:
    """Truncated importance weights `min(pi_trainer / pi_engine, threshold)` of sampled tokens.

    trainer_logprobs, engine_logprobs, mask: `(B, T)`. `level="token"`
    weighs each token by its own ratio; `level="sequence"` weighs every
    token of a row by the product of the ratios over its masked tokens.
    Returns `(B, T)` float32 without gradient (0 where the mask is 0).
    """
    log_ratio = (trainer_logprobs.detach().float() - engine_logprobs.float()) * mask
    if level == "sequence":
        log_ratio = log_ratio.sum(dim=-1, keepdim=True).expand_as(mask)
    elif level != "token":
        raise ValueError(f"unknown rollout_is level '{level}': token or sequence")
    # min(exp(x), C) as exp(min(x, log C)): no overflow for a sequence of large ratios
    return log_ratio.clamp(max=math.log(threshold)).exp() * mask


class _ChunkedTokenLogprobs(torch.autograd.Function):
    """log-softmax(logits / T) at the target ids, computed a few rows at a time; `T` is one per row.

    Only the logits (in their own dtype, often bf16) and one float per row
    are kept for backward; the float32 copy of a chunk lives only while that
    chunk is processed, so the `(N, V)` float32 tensor is never whole. Kept
    over `F.log_softmax`/`F.cross_entropy`, which save that whole tensor for
    backward (0.6 MB a token on a 150k vocabulary).
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        logits: torch.Tensor,
        targets: torch.Tensor,
        temperature: torch.Tensor,
        chunk: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n = logits.shape[0]
        out = torch.empty(n, dtype=torch.float32, device=logits.device)
        entropy = torch.empty(n, dtype=torch.float32, device=logits.device)
        lse = torch.empty(n, dtype=torch.float32, device=logits.device)
        for start in range(0, n, chunk):
            x = logits[start : start + chunk].float() / temperature[start : start + chunk, None]
            z = torch.logsumexp(x, dim=-1)
            lse[start : start + chunk] = z
            out[start : start + chunk] = x.gather(1, targets[start : start + chunk, None])[:, 0] - z
            probs = (x - z[:, None]).exp_()
            entropy[start : start + chunk] = z - (probs * x).sum(-1)
        ctx.save_for_backward(logits, targets, lse, temperature)
        ctx.chunk = chunk
        ctx.mark_non_differentiable(entropy)
        return out, entropy

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx, grad_out: torch.Tensor, _grad_entropy: torch.Tensor
    ) -> tuple[torch.Tensor, None, None, None]:
        logits, targets, lse, temperature = ctx.saved_tensors  # type: ignore[attr-defined]
        chunk = ctx.chunk  # type: ignore[attr-defined]
        grad = torch.empty_like(logits)
        for start in range(0, logits.shape[0], chunk):
            rows = slice(start, start + chunk)
            # d/dx [x_y/T - logsumexp(x/T)] = (onehot(y) - softmax(x/T)) / T
            t = temperature[rows, None]
            g = (logits[rows].float() / t - lse[rows, None]).exp_().neg_()
            g.scatter_add_(1, targets[rows, None], torch.ones_like(g[:, :1]))
            grad[rows] = g * (grad_out[rows, None] / t)
        return grad, None, None, None


def token_logprobs(
    logits: torch.Tensor,
    targets: torch.Tensor,
    temperature: float | torch.Tensor = 1.0,
    chunk: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of `targets` under softmax(logits / temperature), and the entropy there.

    logits: `(B, T, V)` (any float dtype); targets: `(B, T)` long;
    temperature: one for all, or `(B, T)`, each position's own (the
    temperature its token was sampled at). Returns `(logprobs, entropy)`,
    both `(B, T)` float32; gradients flow through `logprobs` only. Rows are
    processed `chunk` positions at a time.
    """
    b, t, v = logits.shape
    temperatures = torch.as_tensor(temperature, dtype=torch.float32, device=logits.device).expand(b, t)
    lp, ent = _ChunkedTokenLogprobs.apply(
        logits.reshape(b * t, v), targets.reshape(b * t), temperatures.reshape(b * t), chunk
    )
    return lp.view(b, t), ent.view(b, t)
