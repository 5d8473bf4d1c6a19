"""The trainer's log-probs are at the temperature each call was sampled with, not the config's."""

import asyncio
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from astuner_backbone_torch.batching import make_micro_batches, token_temperatures  # noqa: E402
from astuner_backbone_torch.engine import TransformersEngine, TransformersEngineSettings  # noqa: E402
from astuner_backbone_torch.losses import token_logprobs  # noqa: E402
from astuner_backbone_torch.policy import Policy  # noqa: E402
from astuner_backbone_torch.settings import TorchSettings  # noqa: E402
from astuner_backbone_torch.trainer import PolicyTrainer, UpdateSettings  # noqa: E402

from astuner.config import load_config  # noqa: E402
from astuner.core.merge import merge_calls  # noqa: E402
from astuner.core.tokenizer import load_tokenizer  # noqa: E402
from astuner.core.tracker import ContextTracker, TrackerSettings  # noqa: E402
from astuner.core.trajectory import CallSampling, Sample  # noqa: E402
from astuner.rollout.model_tuner import ModelTuner  # noqa: E402
from astuner.rollout.sampling import sampling_from_config  # noqa: E402
from astuner.training import AgentPlan  # noqa: E402

FP32 = TorchSettings(train_dtype="float32", gen_dtype="float32")
CONFIG_TEMPERATURE = 1.0


def rollout_samples(tiny_model_dir: Path, policy: Policy) -> list[Sample]:
    """Calls at temperatures 0.5 and 1.5 (one conversation of two turns, and two single calls)."""
    config = load_config(
        None, [f"model.path={tiny_model_dir}", f"rollout.temperature={CONFIG_TEMPERATURE}"], environ={}
    )
    engine = TransformersEngine(policy.generator, TransformersEngineSettings(batch_wait_ms=1))
    tokenizer = load_tokenizer(tiny_model_dir)
    tuner = ModelTuner(
        rollout_id="r",
        engine=engine,
        sampling=sampling_from_config(config.rollout).override(max_tokens=6, seed=5),
        tracker=ContextTracker(tokenizer, TrackerSettings(max_response_length_in_one_turn=6)),
    )

    async def run() -> None:
        question = [{"role": "user", "content": "What is 2 + 3?"}]
        first = await tuner.chat(question, agent_name="talker", temperature=0.5)
        history = [*question, {"role": "assistant", "content": first.text}]
        await tuner.chat(
            [*history, {"role": "user", "content": "Sure?"}], agent_name="talker", temperature=1.5
        )
        await tuner.chat(question, agent_name="cold", temperature=0.5)
        await tuner.chat(question, agent_name="hot", temperature=1.5)

    asyncio.run(run())
    samples, _ = merge_calls(tuner.calls)
    return samples


def test_trainer_logprobs_use_each_calls_recorded_temperature(tiny_model_dir: Path) -> None:
    config = load_config(None, [f"model.path={tiny_model_dir}"], environ={})
    torch.manual_seed(0)
    policy = Policy.load(config.model, FP32, plan=AgentPlan(), need_reference=False)
    trainer = PolicyTrainer(policy, UpdateSettings(temperature=CONFIG_TEMPERATURE))
    samples = rollout_samples(tiny_model_dir, policy)
    recorded = {s.temperature for sample in samples for s in sample.response_sampling if s}
    assert recorded == {0.5, 1.5}

    batches = make_micro_batches(samples, 4096, trainer.pad_id, temperature=CONFIG_TEMPERATURE)
    checked = 0
    for batch in batches:
        with torch.no_grad():
            trainer_lp, _ = trainer.logprobs(policy.model, batch)
        for row, index in enumerate(batch.indices):
            sample = samples[index]
            ids = torch.tensor([sample.input_ids])
            with torch.no_grad():
                logits = policy.model(ids).logits[0, :-1].float()
            targets = ids[0, 1:, None]
            temperatures = torch.tensor(token_temperatures(sample, CONFIG_TEMPERATURE)[1:])
            expected = torch.log_softmax(logits / temperatures[:, None], -1).gather(1, targets)[:, 0]
            at_config = torch.log_softmax(logits / CONFIG_TEMPERATURE, -1).gather(1, targets)[:, 0]
            mask = torch.tensor(sample.loss_mask[1:], dtype=torch.bool)
            got = trainer_lp[row, : len(mask)][mask]
            assert torch.allclose(got, expected[mask], atol=1e-4)
            # The engine sampled at the same temperatures: its log-probs agree with the trainer's.
            engine_lp = torch.tensor(sample.old_logprobs[1:])[mask]
            assert torch.allclose(got, engine_lp, atol=1e-4)
            # The config's temperature would have given other numbers: the check can fail.
            assert not torch.allclose(got, at_config[mask], atol=1e-3)
            checked += int(mask.sum())
    assert checked == sum(sum(s.loss_mask) for s in samples)


def test_token_temperatures_follow_the_spans_and_fall_back_to_the_config() -> None:
    sample = Sample(
        input_ids=list(range(10)),
        loss_mask=[0, 0, 1, 1, 0, 0, 1, 1, 1, 0],
        response_spans=[(2, 4, 0), (6, 9, 1)],
        response_sampling=[CallSampling(temperature=0.5), CallSampling(temperature=0.0)],
    )
    # A greedy call's log-probs are at temperature 1.
    assert token_temperatures(sample, 0.9) == [0.9, 0.9, 0.5, 0.5, 0.9, 0.9, 1.0, 1.0, 1.0, 0.9]
    unrecorded = sample.model_copy(update={"response_sampling": [None, CallSampling(temperature=2.0)]})
    assert token_temperatures(unrecorded, 0.9)[2:4] == [0.9, 0.9]
    older = sample.model_copy(update={"response_sampling": []})
    assert token_temperatures(older, 0.9) == [0.9] * 10


def test_chunked_logprobs_with_a_temperature_per_position_match_in_value_and_gradient() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 30, requires_grad=True)
    targets = torch.randint(0, 30, (2, 5))
    temperatures = torch.rand(2, 5) * 1.5 + 0.25
    weights = torch.randn(2, 5)
    lp, _ = token_logprobs(logits, targets, temperatures, chunk=3)
    (grad,) = torch.autograd.grad((lp * weights).sum(), logits)

    reference = torch.log_softmax(logits / temperatures[..., None], -1).gather(-1, targets[..., None])[..., 0]
    (expected_grad,) = torch.autograd.grad((reference * weights).sum(), logits)
    assert torch.allclose(lp, reference, atol=1e-5)
    assert torch.allclose(grad, expected_grad, atol=1e-5)
