"""Engine `transformers` loading its own model serves each agent's fixed adapter (`EngineModel.adapters`).

This is what `astuner eval` and backbone debug run on: outside the training
loop an agent with `agents.<name>.lora.path` still generates with its adapter.
"""

import asyncio
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from astuner_backbone_torch.adapters import using_adapter  # noqa: E402
from astuner_backbone_torch.engine import TransformersEngine, TransformersEngineSettings  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from astuner.api import AstunerError, EngineModel  # noqa: E402
from astuner.rollout.engine import SamplingParams  # noqa: E402

SETTINGS = TransformersEngineSettings(device="cpu", dtype="float32", batch_wait_ms=1)
PROMPT = [5, 17, 42, 7, 99]


@pytest.fixture(scope="module")
def adapter_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An adapter saved by peft on the tiny model, with weights that change its outputs (B is not 0)."""
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    lora = peft.get_peft_model(base, peft.LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, param in lora.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    folder = tmp_path_factory.mktemp("adapter") / "clerk"
    lora.save_pretrained(folder)
    return folder


def logprobs(engine: TransformersEngine, adapter: str | None) -> torch.Tensor:
    """The log-probs of a greedy reply to `PROMPT` with `adapter` (None: the base model)."""
    sampling = SamplingParams(temperature=0.0, max_tokens=5, adapter=adapter)
    return torch.tensor(asyncio.run(engine.generate(PROMPT, sampling)).logprobs)


def test_an_agents_fixed_adapter_changes_its_calls_only(tiny_model_dir: Path, adapter_dir: Path) -> None:
    served = EngineModel(path=str(tiny_model_dir), adapters={"clerk": str(adapter_dir)})
    engine = TransformersEngine.serving(SETTINGS, served)
    plain = TransformersEngine.serving(SETTINGS, EngineModel(path=str(tiny_model_dir)))
    assert engine.adapter_names == {"clerk"} and plain.adapter_names == frozenset()
    assert engine.tokenizer_path == plain.tokenizer_path

    base = logprobs(engine, None)
    assert torch.allclose(base, logprobs(plain, None), atol=1e-5)
    assert not torch.allclose(logprobs(engine, "clerk"), base, atol=1e-2)
    # The adapter's calls are what peft computes with it; nothing of it trains.
    generation = asyncio.run(
        engine.generate(PROMPT, SamplingParams(temperature=0.0, max_tokens=5, adapter="clerk"))
    )
    ids = torch.tensor([[*PROMPT, *generation.token_ids]])
    # The worker answers before it leaves the adapter: the weights lock waits for it, as the trainer does.
    with engine.weights_lock:
        assert not any(p.requires_grad for p in engine.model.parameters())
        with using_adapter(engine.model, "clerk"), torch.no_grad():
            logits = engine.model(input_ids=ids).logits[0, len(PROMPT) - 1 : -1]
    expected = torch.log_softmax(logits, -1).gather(1, ids[0, len(PROMPT) :, None])[:, 0]
    assert torch.allclose(torch.tensor(generation.logprobs), expected, atol=1e-4)


@pytest.mark.parametrize("broken", ["missing", "empty"])
def test_a_bad_adapter_folder_names_the_agents_key(tiny_model_dir: Path, tmp_path: Path, broken: str) -> None:
    folder = tmp_path / "clerk"
    if broken == "empty":
        folder.mkdir()
    served = EngineModel(path=str(tiny_model_dir), adapters={"clerk": str(folder)})
    what = "does not exist" if broken == "missing" else "holds no adapter_config.json"
    with pytest.raises(AstunerError, match=rf"agents\.clerk\.lora\.path: '{folder}' {what}"):
        TransformersEngine.serving(SETTINGS, served)
