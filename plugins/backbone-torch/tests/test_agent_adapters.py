"""Per-agent LoRA adapters: each agent generates with its own adapter and trains only it."""

import asyncio
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from astuner_backbone_torch.adapters import ADAPTERS_DIR, adapter_parameters, using_adapter  # noqa: E402
from astuner_backbone_torch.backbone import checkpoint_size  # noqa: E402
from astuner_backbone_torch.checkpoint import read_checkpoint, rng_state, save_checkpoint  # noqa: E402
from astuner_backbone_torch.engine import TransformersEngine, TransformersEngineSettings  # noqa: E402
from astuner_backbone_torch.policy import Policy  # noqa: E402
from astuner_backbone_torch.settings import TorchSettings  # noqa: E402
from astuner_backbone_torch.trainer import PolicyTrainer, UpdateSettings  # noqa: E402

from astuner.config import load_config  # noqa: E402
from astuner.core.policy_losses import ppo_clip_loss  # noqa: E402
from astuner.core.tokenizer import load_tokenizer  # noqa: E402
from astuner.core.tracker import ContextTracker, TrackerSettings  # noqa: E402
from astuner.core.trajectory import Sample  # noqa: E402
from astuner.errors import AstunerError, ConfigError  # noqa: E402
from astuner.rollout.engine import SamplingParams  # noqa: E402
from astuner.rollout.model_tuner import ModelTuner  # noqa: E402
from astuner.training import ChosenLoss, PolicyLossSettings, agent_plan  # noqa: E402

FP32 = TorchSettings(train_dtype="float32", gen_dtype="float32")
# A bfloat16 rollout copy: the update must reach it through `sync_generator`.
BF16_COPY = TorchSettings(train_dtype="float32", gen_dtype="bfloat16")
PPO = ChosenLoss(
    name="ppo_clip", settings=PolicyLossSettings(0.2, 0.2), loss_agg_mode="token-mean", fn=ppo_clip_loss
)


def adapter_config(model_dir: Path, *overrides: str):
    """A config whose agents A and B (unless `overrides` say otherwise) have adapters of rank 4."""
    lora = ["agents.A.lora.rank=4", "agents.B.lora.rank=4"]
    return load_config(None, [f"model.path={model_dir}", *lora, *overrides], environ={})


def load(model_dir: Path, settings: TorchSettings = FP32, *overrides: str, weights: Path | None = None):
    """Adapters A and B with random, different weights (new ones leave the model unchanged: B = 0)."""
    torch.manual_seed(0)
    config = adapter_config(model_dir, *overrides)
    policy = Policy.load(
        config.model,
        settings,
        plan=agent_plan(
            config.agents,
            trainable_targets=config.rollout.trainable_targets,
            shared_lora_rank=config.model.lora.rank,
        ),
        need_reference=False,
        weights=weights,
    )
    if weights is None:
        with torch.no_grad():
            for seed, name in enumerate(policy.trained, 1):
                generator = torch.Generator().manual_seed(seed)
                for p in adapter_parameters(policy.model, name):
                    p.copy_(torch.randn(p.shape, generator=generator) * 0.2)
        policy.sync_generator()
    return policy


def snapshot(model, name: str | None = None) -> list[torch.Tensor]:
    """Adapter `name`'s weights, or the base model's (None), copied."""
    if name is not None:
        return [p.detach().clone() for p in adapter_parameters(model, name)]
    return [p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def routed(tiny_model_dir: Path):
    """Calls of agents A, B and C (no adapter) on one question, in this order, and the policy."""
    policy = load(tiny_model_dir)
    engine = TransformersEngine(
        policy.generator, TransformersEngineSettings(batch_wait_ms=1), adapters=policy.adapters
    )
    flags = [p.requires_grad for p in policy.model.parameters()]
    tuner = ModelTuner(
        rollout_id="r",
        engine=engine,
        sampling=SamplingParams(max_tokens=6, seed=3),
        tracker=ContextTracker(load_tokenizer(tiny_model_dir), TrackerSettings()),
        adapters=engine.adapter_names,
    )

    async def run() -> None:
        for agent in ("A", "B", "C"):  # one after another: B's prompt is in A's store of keys and values
            await tuner.chat([{"role": "user", "content": "What is 2 + 3?"}], agent_name=agent)

    asyncio.run(run())
    # The worker answers a call before it leaves the adapter (peft switches requires_grad meanwhile):
    # the weights lock waits for it, as the trainer's update does.
    with engine.weights_lock:
        assert [p.requires_grad for p in policy.model.parameters()] == flags  # routing trains nothing new
    return policy, engine, {call.agent_name: call for call in tuner.calls}


def call_logprobs(model, call, adapter: str | None) -> torch.Tensor:
    """The log-probs of `call`'s response under `model` with `adapter` active (None: the base)."""
    ids = torch.tensor([[*call.prompt_ids, *call.response_ids]])
    with using_adapter(model, adapter), torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(call.prompt_ids) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(1, ids[0, len(call.prompt_ids) :, None])[:, 0]


@pytest.mark.parametrize("agent", ["A", "B"])
def test_a_call_generates_with_its_agents_adapter_and_records_it(routed, agent: str) -> None:
    policy, _, calls = routed
    call = calls[agent]
    assert call.sampling.adapter == agent
    engine_lp = torch.tensor(call.response_logprobs)
    by = {adapter: call_logprobs(policy.model, call, adapter) for adapter in ("A", "B", None)}
    assert torch.allclose(engine_lp, by[agent], atol=1e-4)
    for other in {"A", "B", None} - {agent}:
        assert not torch.allclose(engine_lp, by[other], atol=1e-2), other


def test_an_agent_without_an_adapter_generates_on_the_base(routed) -> None:
    policy, engine, calls = routed
    call = calls["C"]
    assert call.sampling.adapter is None
    assert torch.allclose(
        torch.tensor(call.response_logprobs), call_logprobs(policy.model, call, None), atol=1e-4
    )
    assert set(engine._prefix_stores) == {"A", "B", None}  # keys and values kept apart per adapter


def test_an_adapter_the_engine_does_not_hold_fails_the_request_naming_the_held_ones(routed) -> None:
    _, engine, calls = routed
    with pytest.raises(AstunerError, match=r"no adapter 'wolf' \(it holds: A, B\)"):
        asyncio.run(engine.generate(calls["A"].prompt_ids, SamplingParams(adapter="wolf")))


def agent_samples(agent: str, seed: int) -> list[Sample]:
    generator = torch.Generator().manual_seed(seed)
    samples = []
    for advantage in (1.0, -1.0):
        ids = torch.randint(10, 400, (12,), generator=generator).tolist()
        samples.append(
            Sample(
                agent_name=agent,
                input_ids=ids,
                loss_mask=[0] * 7 + [1] * 5,
                advantages=[0.0] * 7 + [advantage] * 5,
            )
        )
    return samples


def test_an_update_trains_each_adapter_on_its_own_agents_samples_only(tiny_model_dir: Path) -> None:
    three = ("agents.D.lora.rank=4",)
    policy = load(tiny_model_dir, BF16_COPY, *three)
    base, before = snapshot(policy.model), {name: snapshot(policy.model, name) for name in "ABD"}
    trainer = PolicyTrainer(policy, UpdateSettings(lr=1e-2, policy_loss=PPO))
    metrics = trainer.update(agent_samples("A", 1) + agent_samples("B", 2) + agent_samples("C", 3))

    assert same(snapshot(policy.model), base)
    assert not same(snapshot(policy.model, "A"), before["A"])
    assert not same(snapshot(policy.model, "B"), before["B"])
    assert same(snapshot(policy.model, "D"), before["D"])  # no samples of D: untouched
    assert metrics["samples_without_adapter"] == 2  # C has no adapter
    assert metrics["A/tokens_trained"] == metrics["B/tokens_trained"] == 10
    assert metrics["tokens_trained"] == 20 and "D/loss" not in metrics
    for name in "ABD":  # the rollout copy got every trained adapter, not only the last active one
        copied = snapshot(policy.generator, name)
        assert same(copied, [p.to(torch.bfloat16) for p in snapshot(policy.model, name)])

    # A's update is what A's samples alone give: B's samples never reach it.
    alone = load(tiny_model_dir, BF16_COPY, *three)
    PolicyTrainer(alone, UpdateSettings(lr=1e-2, policy_loss=PPO)).update(agent_samples("A", 1))
    assert same(snapshot(alone.model, "A"), snapshot(policy.model, "A"))
    assert same(snapshot(alone.model, "B"), before["B"])


@pytest.fixture(scope="module")
def checkpoint(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """A checkpoint of adapters A and B after one update, and the trainer that wrote it."""
    policy = load(tiny_model_dir)
    trainer = PolicyTrainer(policy, UpdateSettings(lr=1e-2, policy_loss=PPO))
    trainer.update(agent_samples("A", 1) + agent_samples("B", 2))
    root = tmp_path_factory.mktemp("checkpoints")
    path = save_checkpoint(
        root, 1, save_model=policy.save, tensors={**trainer.state_dict(), "rng": rng_state()}, state={}
    )
    return path, trainer


def test_a_checkpoint_of_two_adapters_resumes_both_and_their_optimizers(
    tiny_model_dir: Path, checkpoint
) -> None:
    path, trainer = checkpoint
    assert sorted(p.name for p in (path / ADAPTERS_DIR).iterdir() if p.is_dir()) == ["A", "B"]
    resumed = PolicyTrainer(load(tiny_model_dir, weights=path), UpdateSettings(lr=1e-2, policy_loss=PPO))
    loaded = read_checkpoint(path)
    assert loaded is not None
    resumed.load_state_dict(loaded.tensors())

    for name in "AB":
        assert same(snapshot(resumed.policy.model, name), snapshot(trainer.policy.model, name))
        assert all(p.requires_grad for p in adapter_parameters(resumed.policy.model, name))
        saved = trainer.learners[name].state_dict()
        restored = resumed.learners[name].state_dict()
        assert restored["scheduler"] == saved["scheduler"]
        for index, state in saved["optimizer"]["state"].items():
            for key, value in state.items():
                assert torch.equal(restored["optimizer"]["state"][index][key], value), (name, key)
    assert same(snapshot(resumed.policy.model), snapshot(trainer.policy.model))
    # Weights and both moments of every trained adapter, in float32.
    numel = sum(p.numel() for p in resumed.policy.trainable_parameters())
    assert numel == sum(p.numel() for name in "AB" for p in adapter_parameters(resumed.policy.model, name))
    assert checkpoint_size(resumed.policy) == 3 * 4 * numel


def test_a_saved_adapter_serves_as_a_fixed_one(tiny_model_dir: Path, checkpoint) -> None:
    path, trainer = checkpoint
    fixed = (f"agents.B.lora.path={path / ADAPTERS_DIR / 'B'}", "rollout.trainable_targets=[A]")
    policy = load(tiny_model_dir, FP32, *fixed)
    assert policy.trained == ("A",) and policy.adapters == {"A", "B"}
    assert same(snapshot(policy.model, "B"), snapshot(trainer.policy.model, "B"))
    assert not any(p.requires_grad for p in adapter_parameters(policy.model, "B"))
    assert len(PolicyTrainer(policy, UpdateSettings()).learners) == 1


def test_resuming_with_other_adapters_is_a_config_error_naming_them(tiny_model_dir: Path, checkpoint) -> None:
    path, _ = checkpoint
    config = adapter_config(
        tiny_model_dir,
        "agents.C.lora.rank=4",
        f"agents.B.lora.path={path / ADAPTERS_DIR / 'B'}",  # B does not train now: fixed
        "rollout.trainable_targets=[A,C]",
    )
    with pytest.raises(ConfigError, match=r"trains \['C'\].*holds adapters of \['B'\]"):
        Policy.load(
            config.model,
            FP32,
            plan=agent_plan(
                config.agents,
                trainable_targets=config.rollout.trainable_targets,
                shared_lora_rank=config.model.lora.rank,
            ),
            need_reference=False,
            weights=path,
        )
