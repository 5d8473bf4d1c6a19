"""The loss math: chunked log-probs, KL estimators, step-wide aggregation (policy losses: kernel tests)."""

import pytest

torch = pytest.importorskip("torch")

from astuner_backbone_torch.losses import (  # noqa: E402
    KL_ESTIMATORS,
    aggregate,
    kl_penalty,
    rollout_is_weights,
    step_norm,
    token_logprobs,
)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_logprobs_match_log_softmax_in_value_and_gradient(dtype) -> None:
    torch.manual_seed(0)
    logits = torch.randn(3, 7, 50).to(dtype).requires_grad_(True)
    targets = torch.randint(0, 50, (3, 7))
    weights = torch.randn(3, 7)
    lp, entropy = token_logprobs(logits, targets, temperature=0.7, chunk=4)
    (grad,) = torch.autograd.grad((lp * weights).sum(), logits)

    reference = torch.log_softmax(logits.float() / 0.7, -1)
    expected = reference.gather(-1, targets[..., None])[..., 0]
    (expected_grad,) = torch.autograd.grad((expected * weights).sum(), logits)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert lp.dtype == torch.float32 and lp.shape == (3, 7)
    assert torch.allclose(lp, expected, atol=tol)
    assert torch.allclose(grad.float(), expected_grad.float(), atol=tol)
    assert torch.allclose(entropy, -(reference.exp() * reference).sum(-1), atol=1e-4)
    assert not entropy.requires_grad


def test_kl_estimators_vanish_at_equal_policies_and_low_var_kl_is_never_negative() -> None:
    torch.manual_seed(1)
    lp = torch.randn(4, 6) - 2
    for kind in KL_ESTIMATORS:
        assert torch.allclose(kl_penalty(lp, lp, kind), torch.zeros_like(lp))
    other = torch.randn(4, 6) - 2
    assert (kl_penalty(lp, other, "low_var_kl") >= 0).all()
    assert torch.allclose(kl_penalty(lp, other, "kl"), lp - other)
    with pytest.raises(ValueError, match="low_var_kl"):
        kl_penalty(lp, other, "nope")


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_aggregation_does_not_depend_on_how_a_step_is_split(mode) -> None:
    torch.manual_seed(2)
    loss = torch.randn(6, 5)
    mask = (torch.rand(6, 5) > 0.4).float()
    mask[0] = 0.0  # a sequence with nothing to train counts for no sequence
    whole = aggregate(loss, mask, mode, step_norm([mask]))
    parts = [slice(0, 2), slice(2, 3), slice(3, 6)]
    norm = step_norm([mask[p] for p in parts])
    split = sum(aggregate(loss[p], mask[p], mode, norm) for p in parts)
    assert torch.allclose(whole, split)
    if mode == "token-mean":
        assert torch.allclose(whole, (loss * mask).sum() / mask.sum())
    else:
        per_seq = (loss * mask).sum(-1)
        if mode == "seq-mean-token-mean":
            per_seq = per_seq / mask.sum(-1).clamp(min=1)
        assert torch.allclose(whole, per_seq.sum() / 5)
    with pytest.raises(ValueError, match="token-mean"):
        aggregate(loss, mask, "mean", step_norm([mask]))


def test_rollout_is_weights_are_the_ratio_capped_at_the_threshold() -> None:
    trainer = torch.log(torch.tensor([[0.5, 0.5, 0.5, 0.5]]))
    engine = torch.log(torch.tensor([[0.5, 0.25, 0.1, 0.5]]))  # ratios 1, 2, 5, 1
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    token = rollout_is_weights(trainer, engine, mask, "token", threshold=3.0)
    assert torch.allclose(token, torch.tensor([[1.0, 2.0, 3.0, 0.0]]))
    # sequence: the product over the masked tokens (1 * 2 * 5 = 10), capped, on every masked token
    sequence = rollout_is_weights(trainer, engine, mask, "sequence", threshold=3.0)
    assert torch.allclose(sequence, torch.tensor([[3.0, 3.0, 3.0, 0.0]]))
    assert torch.allclose(
        rollout_is_weights(trainer, engine, mask, "sequence", threshold=20.0)[0, 0], 10.0 * torch.ones(())
    )
    # a very long sequence of large ratios does not overflow
    huge = rollout_is_weights(
        torch.zeros(1, 2000), torch.full((1, 2000), -5.0), torch.ones(1, 2000), "sequence"
    )
    assert torch.isfinite(huge).all() and torch.allclose(huge, torch.full((1, 2000), 2.0))
