"""The built-in policy losses against values worked out by hand, gradients included.

Each case is chosen so that another loss's formula (PPO's, most often) gives
other numbers: a test passes only for the formula it names.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from astuner.core.policy_losses import cispo_loss, dapo_loss, gspo_loss, ppo_clip_loss  # noqa: E402
from astuner.training import PolicyLossSettings as Clip  # noqa: E402


def tokens(ratios: list[float], logprobs: list[float] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One row `(1, T)` of log-probs (with gradient) and old log-probs whose ratios are `ratios`."""
    new = torch.tensor([logprobs or [0.0] * len(ratios)])
    old = new - torch.log(torch.tensor([ratios]))
    return new.requires_grad_(True), old


def grad_of_sum(loss: torch.Tensor, logprobs: torch.Tensor) -> torch.Tensor:
    (grad,) = torch.autograd.grad(loss.sum(), logprobs)
    return grad


def test_ppo_clip_takes_the_pessimistic_term() -> None:
    new, old = tokens([1.0, 1.5, 0.5, 1.1])
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    loss, clipped = ppo_clip_loss(new, old, adv, torch.ones(1, 4), Clip(0.2, 0.2))
    # r=1.0, A=1:  -min(1.0, 1.0)         = -1.0
    # r=1.5, A=1:  -min(1.5, 1.2)         = -1.2  (clipped)
    # r=0.5, A=-1: -min(-0.5, -0.8)       =  0.8  (clipped)
    # r=1.1, A=-1: -min(-1.1, -1.1)       =  1.1
    assert torch.allclose(loss, torch.tensor([[-1.0, -1.2, 0.8, 1.1]]))
    assert clipped.tolist() == [[0.0, 1.0, 1.0, 0.0]]
    # d/dlogp of -A r = -A r where unclipped; 0 where the clipped (constant) term was taken.
    assert torch.allclose(grad_of_sum(loss, new), torch.tensor([[-1.0, 0.0, 0.0, 1.1]]))


def test_dapo_clips_higher_than_lower() -> None:
    new, old = tokens([1.25, 1.4, 0.75, 0.85])
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    loss, clipped = dapo_loss(new, old, adv, torch.ones(1, 4), Clip(0.2, 0.28))
    # range [0.8, 1.28]:
    # r=1.25, A=1:  -min(1.25, 1.25)   = -1.25  (inside: a symmetric 0.2 clip would give -1.2)
    # r=1.4,  A=1:  -min(1.4, 1.28)    = -1.28  (clipped above at 1 + 0.28)
    # r=0.75, A=-1: -min(-0.75, -0.8)  =  0.8   (clipped below at 1 - 0.2)
    # r=0.85, A=-1: -min(-0.85, -0.85) =  0.85
    assert torch.allclose(loss, torch.tensor([[-1.25, -1.28, 0.8, 0.85]]))
    assert clipped.tolist() == [[0.0, 1.0, 1.0, 0.0]]
    # gradient -A r where unclipped: -1.25 and +0.85; the clipped tokens none.
    assert torch.allclose(grad_of_sum(loss, new), torch.tensor([[-1.25, 0.0, 0.0, 0.85]]))
    # The same token under one symmetric range is clipped: the asymmetry is what lets r=1.25 learn.
    symmetric, sym_clipped = dapo_loss(new, old, adv, torch.ones(1, 4), Clip(0.2, 0.2))
    assert sym_clipped[0, 0] == 1.0 and math.isclose(float(symmetric[0, 0].detach()), -1.2, rel_tol=1e-6)


def gspo_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two rows, the second with a padding column whose (garbage) log-ratio is 7.0."""
    old = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.5, -4.0]])
    # row 0: log-ratios 0.3, -0.1, 0.1 (mean 0.1); row 1: 0.9, -0.1 (mean 0.4), then padding.
    new = (old + torch.tensor([[0.3, -0.1, 0.1], [0.9, -0.1, 7.0]])).requires_grad_(True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv = torch.ones(2, 3)
    return new, old, adv, mask


def test_gspo_uses_the_length_normalised_sequence_ratio_on_every_token() -> None:
    new, old, adv, mask = gspo_case()
    loss, clipped = gspo_loss(new, old, adv, mask, Clip(0.1, 0.2))
    # range [0.9, 1.2]
    # row 0: s = exp(0.1) = 1.1051709, inside: each token's loss -A s = -1.1051709
    # row 1: s = exp(0.4) = 1.4918247 > 1.2: clipped, each token's loss -1.2
    s0 = math.exp(0.1)
    expected = torch.tensor([[-s0, -s0, -s0], [-1.2, -1.2, -1.2]])
    assert torch.allclose(loss * mask, expected * mask)
    assert (clipped * mask).tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]
    # One value per sequence: every generated token of a row has its sequence's loss.
    for row in range(2):
        values = loss[row][mask[row] > 0]
        assert torch.allclose(values, values[0].expand_as(values))
    # d/dlogp_t of -A exp(sg[log s] + logp_t - sg[logp_t]) = -A s on its own token:
    # row 0: -1.1051709 on each token; row 1 is clipped: 0.
    grad = grad_of_sum(loss * mask, new)
    assert torch.allclose(grad, torch.tensor([[-s0, -s0, -s0], [0.0, 0.0, 0.0]]))
    # Per token PPO would clip row 0's first token (r = exp(0.3) = 1.35) and not row 1's second
    # (r = exp(-0.1) = 0.905): GSPO clips whole sequences.
    ppo_loss, ppo_clipped = ppo_clip_loss(new, old, adv, mask, Clip(0.1, 0.2))
    assert ppo_clipped[0, 0] == 1.0 and ppo_clipped[1, 1] == 0.0
    assert not torch.allclose(ppo_loss * mask, loss * mask)


def test_gspo_padding_does_not_change_the_result() -> None:
    new, old, adv, mask = gspo_case()
    padded, padded_clipped = gspo_loss(new, old, adv, mask, Clip(0.1, 0.2))
    for garbage in (-30.0, 0.0, 50.0):
        other = new.detach().clone()
        other[1, 2] = old[1, 2] + garbage
        loss, clipped = gspo_loss(other, old, adv, mask, Clip(0.1, 0.2))
        assert torch.allclose(loss * mask, padded * mask)
        assert torch.equal(clipped * mask, padded_clipped * mask)
    # Row 1 alone, without its padding column: the same two values.
    alone, _ = gspo_loss(new[1:, :2], old[1:, :2], adv[1:, :2], mask[1:, :2], Clip(0.1, 0.2))
    assert torch.allclose(alone, padded[1:, :2])


def test_gspo_gradient_is_scaled_by_the_sequence_ratio_when_unclipped() -> None:
    # One row, log-ratios 0.2 and 0.6: s = exp(0.4) = 1.4918247; A = -1 keeps it unclipped
    # (-min(-s, -1.2) = s). Loss per token s; gradient -A s = +1.4918247 on each token.
    new, old = tokens([math.exp(0.2), math.exp(0.6)], logprobs=[-1.0, -3.0])
    adv = torch.full((1, 2), -1.0)
    loss, clipped = gspo_loss(new, old, adv, torch.ones(1, 2), Clip(0.1, 0.2))
    s = math.exp(0.4)
    assert torch.allclose(loss, torch.tensor([[s, s]]))
    assert clipped.tolist() == [[0.0, 0.0]]
    assert torch.allclose(grad_of_sum(loss, new), torch.tensor([[s, s]]))


def test_cispo_keeps_the_gradient_of_clipped_tokens_at_the_clipped_weight() -> None:
    new, old = tokens([1.0, 1.5, 0.5, 1.1], logprobs=[-1.0, -0.5, -2.0, -0.2])
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    loss, clipped = cispo_loss(new, old, adv, torch.ones(1, 4), Clip(0.2, 0.28))
    # w = clip(r, 0.8, 1.28) = [1.0, 1.28, 0.8, 1.1]; loss = -w A logp:
    # -1.0*1*(-1.0) = 1.0; -1.28*1*(-0.5) = 0.64; -0.8*(-1)*(-2.0) = -1.6; -1.1*(-1)*(-0.2) = -0.22
    assert torch.allclose(loss, torch.tensor([[1.0, 0.64, -1.6, -0.22]]))
    assert clipped.tolist() == [[0.0, 1.0, 1.0, 0.0]]
    # gradient -w A, on every token: PPO would give 0 on the two clipped ones.
    assert torch.allclose(grad_of_sum(loss, new), torch.tensor([[-1.0, -1.28, 0.8, 1.1]]))
    # clip_low 1.0 (CISPO's default): no lower bound, r = 0.5 keeps its weight 0.5.
    loss, clipped = cispo_loss(new, old, adv, torch.ones(1, 4), Clip(1.0, 0.28))
    assert clipped.tolist() == [[0.0, 1.0, 0.0, 0.0]]
    assert torch.allclose(grad_of_sum(loss, new), torch.tensor([[-1.0, -1.28, 0.5, 1.1]]))


@pytest.mark.parametrize("loss_fn", [ppo_clip_loss, dapo_loss, gspo_loss, cispo_loss])
def test_a_wild_log_ratio_stays_finite(loss_fn) -> None:
    new = torch.tensor([[0.0, -1.0]], requires_grad=True)
    old = torch.tensor([[-500.0, -1.0]])  # a ratio of e^500 would overflow
    adv = torch.tensor([[-1.0, -1.0]])
    loss, clipped = loss_fn(new, old, adv, torch.ones(1, 2), Clip(0.2, 0.28))
    assert torch.isfinite(loss).all() and torch.isfinite(clipped).all()
    assert torch.isfinite(grad_of_sum(loss, new)).all()


def test_gspo_clips_a_sequence_whole_even_beside_a_large_log_prob() -> None:
    # log s = 3.9977e-4, just inside the paper's 4e-4 ceiling; in float32, `log s + logp` at
    # logp = -17.3 rounds by ~1e-6, which would clip that token's ratio and not its neighbour's.
    logprobs = torch.tensor([[-0.05, -17.3]], requires_grad=True)
    old = logprobs.detach() - torch.tensor([[4.0090547e-4, 3.9907233e-4]])
    loss, clipped = gspo_loss(logprobs, old, torch.ones(1, 2), torch.ones(1, 2), Clip(3e-4, 4e-4))
    assert clipped.tolist() == [[0.0, 0.0]]
    assert float(loss[0, 0]) == float(loss[0, 1])
    assert torch.allclose(grad_of_sum(loss, logprobs), loss.detach())
