"""Policy updates on the tiny model: the loss falls, merging keeps the gradient, KL starts at zero."""

import math
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from astuner_backbone_torch.batching import make_micro_batches  # noqa: E402
from astuner_backbone_torch.checkpoint import ensure_finite  # noqa: E402
from astuner_backbone_torch.losses import step_norm  # noqa: E402
from astuner_backbone_torch.policy import Policy  # noqa: E402
from astuner_backbone_torch.settings import TorchSettings  # noqa: E402
from astuner_backbone_torch.trainer import PolicyTrainer, UpdateSettings  # noqa: E402

from astuner.config import load_config  # noqa: E402
from astuner.core.merge import merge_calls  # noqa: E402
from astuner.core.trajectory import LLMCall, Sample  # noqa: E402
from astuner.errors import AstunerError  # noqa: E402
from astuner.training import AgentPlan, Plugins, policy_loss  # noqa: E402

FP32 = TorchSettings(train_dtype="float32", gen_dtype="float32")


def make_trainer(
    tiny_model_dir: Path, need_reference: bool = False, overrides: tuple[str, ...] = (), **update
) -> PolicyTrainer:
    """A trainer of the tiny model; `overrides` of the config choose its policy loss (default PPO clip)."""
    config = load_config(None, [f"model.path={tiny_model_dir}", *overrides], environ={})
    torch.manual_seed(0)
    policy = Policy.load(config.model, FP32, plan=AgentPlan(), need_reference=need_reference)
    chosen = policy_loss(Plugins(load_entry_points=False), config.trainer_common)
    return PolicyTrainer(policy, UpdateSettings(policy_loss=chosen, **update))


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
    wide = ("trainer_common.clip_ratio_low=10.0", "trainer_common.clip_ratio_high=10.0")
    trainer = make_trainer(tiny_model_dir, overrides=wide, lr=3e-3, max_tokens=32)
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
    trainer = make_trainer(tiny_model_dir, overrides=("trainer_common.loss_agg_mode=token-mean",))
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
    state = trainer.learners[None].optimizer.state_dict()["state"]
    assert int(next(iter(state.values()))["step"]) == 4


def weights(trainer: PolicyTrainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.policy.model.parameters()]


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_skipping_zero_advantage_samples_leaves_the_update_unchanged(tiny_model_dir: Path, mode: str) -> None:
    batch = fixed_batch()
    for sample in batch[2:]:  # an equal-reward group: advantage 0 everywhere
        sample.advantages = [0.0] * len(sample.advantages)
    runs = {}
    for skip in (True, False):
        agg = (f"trainer_common.loss_agg_mode={mode}",)
        trainer = make_trainer(tiny_model_dir, overrides=agg, lr=1e-2, skip_zero_advantage=skip)
        samples = with_old_logprobs(trainer, batch)
        runs[skip] = [trainer.update(samples) for _ in range(2)], weights(trainer)
    (skipped, w_skip), (full, w_full) = runs[True], runs[False]
    assert skipped[0]["skipped_samples"] == 2 and full[0]["skipped_samples"] == 0
    assert skipped[0]["tokens_trained"] == full[0]["tokens_trained"] == 20
    assert skipped[0]["real_tokens"] < full[0]["real_tokens"]
    # Float noise from other batch shapes, amplified where Adam divides by a tiny second moment:
    # about 1e-5 here. A wrong skip (another normaliser, a lost sample) moves weights by ~lr = 1e-2.
    for a, b in zip(w_skip, w_full, strict=True):
        assert torch.allclose(a, b, atol=1e-4), (a - b).abs().max()


def test_a_step_where_nothing_carries_a_gradient_still_steps_the_optimizer(tiny_model_dir: Path) -> None:
    trainer = make_trainer(tiny_model_dir, lr=1e-2)
    samples = fixed_batch()
    for sample in samples:
        sample.advantages = [0.0] * len(sample.advantages)
    before = weights(trainer)
    metrics = trainer.update(samples)
    assert metrics["micro_batches"] == 0 and metrics["skipped_samples"] == 4
    assert int(next(iter(trainer.learners[None].optimizer.state_dict()["state"].values()))["step"]) == 1
    # AdamW's decoupled weight decay moves the weights even with zero gradients, as without skipping.
    assert any(not torch.equal(a, b) for a, b in zip(before, weights(trainer), strict=True))


def full_forward_logprobs(model, batch) -> torch.Tensor:
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]
    return torch.log_softmax(logits.float(), -1).gather(2, batch.targets[..., None])[..., 0] * batch.mask


def test_output_layer_runs_on_trained_positions_only(tiny_model_dir: Path) -> None:
    trainer = make_trainer(tiny_model_dir)
    model = trainer.policy.model
    (batch,) = make_micro_batches(fixed_batch(), 10_000, trainer.pad_id)
    with torch.no_grad():
        trainer.logprobs(model, batch)  # the first call checks once that the model splits exactly
    rows: list[int] = []
    hook = model.get_output_embeddings().register_forward_hook(lambda _m, a, _o: rows.append(a[0].shape[0]))
    try:
        with torch.no_grad():
            logprobs, _ = trainer.logprobs(model, batch)
    finally:
        hook.remove()
    assert rows == [int(batch.mask.sum())]  # one call, on the 20 trained positions
    assert torch.allclose(logprobs, full_forward_logprobs(model, batch), atol=1e-5)


def test_a_model_that_rescales_its_logits_keeps_the_plain_forward(tiny_model_dir: Path) -> None:
    from astuner_backbone_torch.models import decoder_and_head

    trainer = make_trainer(tiny_model_dir)
    model = trainer.policy.model
    assert decoder_and_head(model) is not None
    plain_forward = model.forward

    def scaled(*args, **kwargs):
        out = plain_forward(*args, **kwargs)
        out.logits = out.logits * 0.5
        return out

    model.forward = scaled
    assert decoder_and_head(model) is None
    (batch,) = make_micro_batches(fixed_batch(), 10_000, trainer.pad_id)
    with torch.no_grad():
        logprobs, _ = trainer.logprobs(model, batch)
    assert torch.allclose(logprobs, full_forward_logprobs(model, batch), atol=1e-5)


def test_a_non_finite_gradient_skips_the_step_and_stops_the_run_after_three(tiny_model_dir: Path) -> None:
    trainer = make_trainer(tiny_model_dir, lr=1e-2)
    good = with_old_logprobs(trainer, fixed_batch())
    poisoned = [sample.model_copy(deep=True) for sample in good]
    poisoned[0].advantages = [float("nan")] * len(poisoned[0].advantages)
    before = weights(trainer)
    for in_a_row in (1, 2):
        metrics = trainer.update(poisoned)
        assert metrics["skipped_updates"] == 1 and trainer.learners[None].nonfinite_in_row == in_a_row
        for a, b in zip(before, weights(trainer), strict=True):
            assert torch.equal(a, b)  # the poisoned step left the weights alone
    assert trainer.update(good)["skipped_updates"] == 0 and trainer.learners[None].nonfinite_in_row == 0
    trainer.update(poisoned)
    trainer.update(poisoned)
    with pytest.raises(AstunerError, match="NaN or infinite in 3 optimizer steps in a row"):
        trainer.update(poisoned)


def test_a_checkpoint_with_non_finite_weights_is_never_written(tiny_model_dir: Path) -> None:
    trainer = make_trainer(tiny_model_dir)
    parameters = list(trainer.policy.trainable_parameters())
    ensure_finite(parameters, step=1)
    with torch.no_grad():
        parameters[0][0, 0] = float("inf")
    with pytest.raises(AstunerError, match="Not writing the step 3 checkpoint: 1 weight tensor"):
        ensure_finite(parameters, step=3)


def shared_prompt_groups() -> list[Sample]:
    """2 groups x 3 samples: a 48- or 56-token prompt, a reply, a tool result (not trained), a reply."""
    torch.manual_seed(5)
    samples = []
    for group, prompt_length in enumerate([48, 56]):
        prompt = torch.randint(10, 400, (prompt_length,)).tolist()
        for k in range(3):
            reply, tool, last = (torch.randint(10, 400, (n,)).tolist() for n in (3 + k, 4, 2 + 3 * k))
            mask = [0] * len(prompt) + [1] * len(reply) + [0] * len(tool) + [1] * len(last)
            advantage = (-1.0) ** k * (0.5 + group + k)
            samples.append(
                Sample(
                    input_ids=prompt + reply + tool + last,
                    loss_mask=mask,
                    advantages=[advantage * m for m in mask],
                )
            )
    return samples


def make_lora_trainer(tiny_model_dir: Path) -> PolicyTrainer:
    config = load_config(None, [f"model.path={tiny_model_dir}", "model.lora.rank=4"], environ={})
    torch.manual_seed(0)
    policy = Policy.load(config.model, FP32, plan=AgentPlan(), need_reference=False)
    with torch.no_grad():  # B starts at 0, which leaves A without gradient: give both one
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
    chosen = policy_loss(Plugins(load_entry_points=False), config.trainer_common)
    return PolicyTrainer(policy, UpdateSettings(policy_loss=chosen))


def backward_with_embeddings(trainer: PolicyTrainer, batch, norm) -> tuple[list[torch.Tensor], list]:
    """Parameter gradients of the batch's loss, and the token embeddings it ran (their .grad filled)."""
    model = trainer.policy.model
    model.zero_grad(set_to_none=True)
    embedded = []

    def keep(_module, _args, out):
        if out.requires_grad:
            out.retain_grad()
        else:  # frozen embeddings (LoRA): the output is a leaf, which keeps its gradient
            out.requires_grad_()
        embedded.append(out)

    hook = model.get_input_embeddings().register_forward_hook(keep)
    try:
        trainer.loss(batch, norm)[0].backward()
    finally:
        hook.remove()
    return [p.grad.clone() for p in trainer.policy.trainable_parameters()], embedded


@pytest.mark.parametrize("lora", [False, True])
def test_a_shared_prompt_gives_the_logprobs_and_gradients_of_whole_rows(
    tiny_model_dir: Path, lora: bool
) -> None:
    trainer = make_lora_trainer(tiny_model_dir) if lora else make_trainer(tiny_model_dir)
    samples = shared_prompt_groups()
    batches = make_micro_batches(samples, 10_000, trainer.pad_id, share_prefix=True)
    assert sorted((b.indices, b.prefix_length) for b in batches) == [([0, 1, 2], 47), ([3, 4, 5], 55)]
    norm = step_norm([b.mask for b in batches])
    for batch in batches:
        p, whole = batch.prefix_length, batch.unshared()
        with torch.no_grad():
            shared_lp, shared_entropy = trainer.logprobs(trainer.policy.model, batch)
            whole_lp, whole_entropy = trainer.logprobs(trainer.policy.model, whole)
        assert torch.allclose(shared_lp, whole_lp[:, p:], atol=1e-5)
        assert torch.allclose(shared_entropy, whole_entropy[:, p:], atol=1e-5)
        assert (shared_lp != 0).sum() == batch.mask.sum()
        shared_grads, (prefix, _rows) = backward_with_embeddings(trainer, batch, norm)
        whole_grads, (rows,) = backward_with_embeddings(trainer, whole, norm)
        assert all(g.abs().sum() > 0 for g in shared_grads)
        for a, b in zip(shared_grads, whole_grads, strict=True):
            assert torch.allclose(a, b, atol=1e-6, rtol=1e-4), (a - b).abs().max()
        # The prefix ran once, and its gradient is what the rows' copies of it get together.
        assert prefix.shape[:2] == (1, p) and prefix.grad.abs().sum() > 0
        assert torch.allclose(prefix.grad[0], rows.grad[:, :p].sum(0), atol=1e-7, rtol=1e-4)


@pytest.mark.parametrize("objective", ["policy_gradient", "likelihood"])
def test_an_update_with_shared_prompts_ends_at_the_weights_of_one_without(
    tiny_model_dir: Path, objective: str
) -> None:
    runs = {}
    for share in (True, False):
        trainer = make_trainer(
            tiny_model_dir,
            need_reference=objective == "policy_gradient",
            use_kl_loss=objective == "policy_gradient",
            kl_loss_coef=0.1,
            lr=1e-2,
            max_tokens=200,
            share_prompt_prefix=share,
        )
        # Adam's first step is about lr x sign(gradient) down to |gradient| ~ eps: with the default
        # 1e-8, float noise of 1e-10 in a 1e-9 gradient would move a weight by 1e-3.
        trainer.learners[None].optimizer.param_groups[0]["eps"] = 1e-6
        samples = with_old_logprobs(trainer, shared_prompt_groups())
        runs[share] = [trainer.update(samples, objective) for _ in range(2)], weights(trainer)
    (shared, w_shared), (whole, w_whole) = runs[True], runs[False]
    assert shared[0]["padded_tokens"] < 0.7 * whole[0]["padded_tokens"]
    assert shared[0]["real_tokens"] == whole[0]["real_tokens"] - 2 * 47 - 2 * 55
    for name in ("loss", "entropy", "tokens_trained", *(["kl"] if objective == "policy_gradient" else [])):
        assert shared[1][name] == pytest.approx(whole[1][name], rel=1e-4, abs=1e-6), name
    for a, b in zip(w_shared, w_whole, strict=True):  # a wrong gradient moves weights by ~lr = 1e-2
        assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()


def test_models_that_cannot_share_a_prompt_run_whole_rows(tiny_model_dir: Path) -> None:
    trainer = make_trainer(tiny_model_dir)
    model = trainer.policy.model
    batch = next(
        b for b in make_micro_batches(shared_prompt_groups(), 10_000, trainer.pad_id, True) if b.prefix_length
    )
    plain_forward = model.forward

    def scaled(*args, **kwargs):  # logits no longer head(body(ids)): no split, so no shared prefix
        out = plain_forward(*args, **kwargs)
        out.logits = out.logits * 0.5
        return out

    model.forward = scaled
    with torch.no_grad():
        logprobs, _ = trainer.logprobs(model, batch)
    expected = full_forward_logprobs(model, batch.unshared())[:, batch.prefix_length :]
    assert torch.allclose(logprobs, expected, atol=1e-5)

    # Gradient checkpointing would run each layer twice on the shared cache: every row runs whole.
    trainer = make_trainer(tiny_model_dir)
    trainer.policy.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    samples = shared_prompt_groups()
    metrics = trainer.update(samples)
    assert metrics["padded_tokens"] == sum(
        b.padded_tokens for b in make_micro_batches(samples, trainer.settings.max_tokens, trainer.pad_id)
    )


def test_the_update_says_where_it_is_once_per_micro_batch(tiny_model_dir: Path) -> None:
    from structlog.testing import capture_logs

    trainer = make_trainer(tiny_model_dir, max_tokens=16, mini_batch_num=2)
    samples = with_old_logprobs(trainer, fixed_batch())
    with capture_logs() as logs:
        metrics = trainer.update(samples)
    lines = [line for line in logs if line["event"] == "update"]
    assert len(lines) == metrics["micro_batches"] > 2
    for step in ("1/2", "2/2"):  # each optimizer step counts its own micro-batches 1..n
        counted = [line["micro_batch"] for line in lines if line["optimizer_step"] == step]
        assert counted == [f"{i}/{len(counted)}" for i in range(1, len(counted) + 1)] and counted
    assert sum(line["tokens"] for line in lines) == metrics["real_tokens"]


def engine_off_by(samples: list[Sample], shift: float) -> list[Sample]:
    """The samples as an engine would return them whose log-probs are `shift` off the trainer's."""
    return [
        s.model_copy(
            update={
                "old_logprobs": [lp + shift * m for lp, m in zip(s.old_logprobs, s.loss_mask, strict=True)]
            }
        )
        for s in samples
    ]


def test_the_update_reports_how_far_the_engine_is_from_the_trainer(tiny_model_dir: Path) -> None:
    trainer = make_trainer(tiny_model_dir, lr=1e-2, mini_batch_num=2)
    samples = engine_off_by(with_old_logprobs(trainer, fixed_batch()), -math.log(4))
    metrics = trainer.update(samples)
    # Measured at the weights the update started from (the first optimizer step's samples), so the
    # gap is the engine's alone and not the first step's change.
    assert metrics["rollout_logprob_gap"] == pytest.approx(math.log(4), abs=1e-4)
    assert metrics["rollout_logprob_gap_max"] == pytest.approx(math.log(4), abs=1e-4)
    assert metrics["rollout_kl"] == pytest.approx(-math.log(4), abs=1e-4)
    assert "rollout_is_weight" not in metrics


def test_truncated_importance_sampling_weights_the_loss_by_the_capped_ratio(tiny_model_dir: Path) -> None:
    """An engine 4x less likely than the trainer on every token: with rollout_is the gradient is the
    on-policy one times the cap (2), whatever PPO's clip would have made of the raw ratio."""
    trainer = make_trainer(tiny_model_dir)
    on_policy = with_old_logprobs(trainer, fixed_batch())
    expected = [2.0 * g for g in gradients(trainer, on_policy)]
    off = engine_off_by(on_policy, -math.log(4))
    plain = trainer.settings
    trainer.settings = replace(plain, rollout_is="token", rollout_is_threshold=2.0)
    corrected = gradients(trainer, off)
    assert any(g.abs().sum() > 0 for g in corrected)
    for a, b in zip(corrected, expected, strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
    # Without it PPO's ratio is taken against the engine: 4 is clipped, so the samples with a
    # positive advantage teach nothing.
    trainer.settings = plain
    positive = [s for s in off if s.advantages[-1] > 0]
    assert all(float(g.abs().sum()) == 0 for g in gradients(trainer, positive) if g is not None)


def test_importance_weights_after_the_first_optimizer_step_use_the_weights_before_it(
    tiny_model_dir: Path,
) -> None:
    trainer = make_trainer(tiny_model_dir, lr=1e-2, mini_batch_num=2, rollout_is="token")
    samples = with_old_logprobs(trainer, fixed_batch())  # the engine agrees with the trainer exactly
    metrics = trainer.update(samples)
    # Had the second optimizer step compared the engine with the weights after the first, the
    # weights would differ from 1 there.
    assert metrics["rollout_is_weight"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["rollout_logprob_gap"] == pytest.approx(0.0, abs=1e-5)


def test_a_policy_gradient_update_without_a_chosen_loss_says_so(tiny_model_dir: Path) -> None:
    trainer = make_trainer(tiny_model_dir)
    trainer.settings = replace(trainer.settings, policy_loss=None)
    with pytest.raises(ValueError, match=r"UpdateSettings\.policy_loss"):
        trainer.update(fixed_batch())
