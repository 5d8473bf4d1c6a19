"""Policy updates on the tiny model: the loss falls, merging keeps the gradient, KL starts at zero."""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from astuner_backbone_torch.batching import make_micro_batches  # noqa: E402
from astuner_backbone_torch.losses import step_norm  # noqa: E402
from astuner_backbone_torch.policy import Policy  # noqa: E402
from astuner_backbone_torch.settings import TorchSettings  # noqa: E402
from astuner_backbone_torch.trainer import PolicyTrainer, UpdateSettings  # noqa: E402

from astuner.config import load_config  # noqa: E402
from astuner.core.merge import merge_calls  # noqa: E402
from astuner.core.trajectory import LLMCall, Sample  # noqa: E402

FP32 = TorchSettings(train_dtype="float32", gen_dtype="float32")


def make_trainer(tiny_model_dir: Path, need_reference: bool = False, **update) -> PolicyTrainer:
    config = load_config(None, [f"model.path={tiny_model_dir}"], environ={})
    torch.manual_seed(0)
    policy = Policy.load(config, FP32, need_reference=need_reference)
    return PolicyTrainer(policy, UpdateSettings(**update))


def fixed_batch() -> list[Sample]:
    torch.manual_seed(3)
    samples = []
    for i, advantage in enumerate([1.0, -1.0, 0.5, -0.5]):
        prompt = torch.randint(10, 400, (6 + i,)).tolist()
        response = torch.randint(10, 400, (5,)).tolist()
        n = len(prompt) + len(response)
        samples.append(
            Sample(
                input_ids=prompt + response,
                loss_mask=[0] * len(prompt) + [1] * len(response),
                advantages=[0.0] * len(prompt) + [advantage] * len(response),
            )
        )
        assert len(samples[-1].input_ids) == n
    return samples


def step_loss(trainer: PolicyTrainer, samples: list[Sample]) -> float:
    batches = make_micro_batches(samples, trainer.settings.max_tokens, trainer.pad_id)
    norm = step_norm([b.mask for b in batches])
    with torch.no_grad():
        return sum(float(trainer.loss(b, norm)[0]) for b in batches)


def with_old_logprobs(trainer: PolicyTrainer, samples: list[Sample]) -> list[Sample]:
    """Fill old log-probs from the current policy, as the engine would have."""
    out = []
    for sample in samples:
        (batch,) = make_micro_batches([sample], 10_000, trainer.pad_id)
        with torch.no_grad():
            lp = trainer.logprobs(trainer.policy.model, batch)[0][0].tolist()
        out.append(sample.model_copy(update={"old_logprobs": [0.0, *lp]}))
    return out


def test_loss_decreases_on_a_fixed_batch(tiny_model_dir: Path) -> None:
    trainer = make_trainer(tiny_model_dir, lr=3e-3, clip_low=10.0, clip_high=10.0, max_tokens=32)
    samples = with_old_logprobs(trainer, fixed_batch())
    before = step_loss(trainer, samples)
    metrics = [trainer.update(samples) for _ in range(5)]
    after = step_loss(trainer, samples)
    assert after < before - 0.05, (before, after)
    assert metrics[0]["micro_batches"] > 1  # the 32-token budget forces accumulation
    assert metrics[0]["tokens_trained"] == 20
    assert all(m["grad_norm"] > 0 for m in metrics)


def two_call_episode() -> list[LLMCall]:
    p1, r1 = [11, 12, 13, 14], [21, 22, 23]
    p2 = [*p1, *r1, 31, 32]  # the second call's prompt extends the first call's prompt + response
    r2 = [41, 42, 43, 44]
    return [
        LLMCall(index=0, prompt_ids=p1, response_ids=r1, response_logprobs=[-1.0, -2.0, -0.5]),
        LLMCall(index=1, prompt_ids=p2, response_ids=r2, response_logprobs=[-0.7, -1.5, -2.5, -0.1]),
    ]


def gradients(trainer: PolicyTrainer, samples: list[Sample]) -> list[torch.Tensor]:
    model = trainer.policy.model
    model.zero_grad(set_to_none=True)
    batches = make_micro_batches(samples, 10_000, trainer.pad_id)
    norm = step_norm([b.mask for b in batches])
    for batch in batches:
        trainer.loss(batch, norm)[0].backward()
    return [p.grad.clone() for p in model.parameters()]


def test_merged_sample_has_the_gradient_of_its_calls_as_separate_samples(tiny_model_dir: Path) -> None:
    trainer = make_trainer(tiny_model_dir, loss_agg_mode="token-mean")
    merged, report = merge_calls(two_call_episode(), merge=True)
    separate, _ = merge_calls(two_call_episode(), merge=False)
    assert len(merged) == 1 and len(separate) == 2 and report.reduction > 1
    for s in [*merged, *separate]:
        s.advantages = [0.8 * m for m in s.loss_mask]
    grad_merged = gradients(trainer, merged)
    grad_separate = gradients(trainer, separate)
    assert any(g.abs().sum() > 0 for g in grad_merged)
    for a, b in zip(grad_merged, grad_separate, strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def test_kl_to_the_reference_is_zero_before_the_first_update(tiny_model_dir: Path) -> None:
    trainer = make_trainer(
        tiny_model_dir, need_reference=True, use_kl_loss=True, kl_loss_coef=0.1, lr=1e-2, mini_batch_num=2
    )
    samples = with_old_logprobs(trainer, fixed_batch())
    (batch,) = make_micro_batches(samples, 10_000, trainer.pad_id)
    with torch.no_grad():
        assert torch.equal(
            trainer.reference_logprobs(batch), trainer.logprobs(trainer.policy.model, batch)[0]
        )
    first = trainer.update(samples)
    second = trainer.update(samples)
    # The first half of the first update ran before any change: only the second half has KL.
    assert 0 < first["kl"] < second["kl"]
    # mini_batch_num=2: two optimizer steps per update
    state = trainer.optimizer.state_dict()["state"]
    assert int(next(iter(state.values()))["step"]) == 4
