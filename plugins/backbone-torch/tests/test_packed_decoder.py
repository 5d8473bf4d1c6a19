"""The packed decoder: which models it takes, its step against the model's forward, and weight changes.

Its decoding against an uncached forward (rows joining and leaving, seeded
sampling, stop tokens, stored prefixes) is in test_kv_cache.py, run both ways.
"""

import asyncio
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from astuner_backbone_torch.decoding import RunningBatch, Sampler  # noqa: E402
from astuner_backbone_torch.engine import TransformersEngine, TransformersEngineSettings  # noqa: E402
from astuner_backbone_torch.packed_decoder import packed_decoder  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402

from astuner.api import SamplingParams  # noqa: E402


def _llama(dtype: torch.dtype = torch.float32) -> LlamaForCausalLM:
    """A tiny random Llama with grouped keys and values (4 query heads, 2 kv heads), no biases and
    llama3 rope scaling: another family than the tiny Qwen2 of the fixtures."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
        attn_implementation="sdpa",
    )
    model = LlamaForCausalLM(config).to(dtype).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.mul_(4)  # next tokens then depend on the context
    return model


def _step_logits(model, decoder) -> torch.Tensor:
    """Logits of one decoding step after three prompts of different lengths, via `decoder` (None: the
    model's forward); the same seeded first tokens either way."""
    torch.manual_seed(0)
    batch = RunningBatch(model, Sampler(temperature=1.0), pad_id=0, decoder=decoder)
    batch.add([[5, 17, 42, 8, 9, 31], [9, 9], [12, 200, 7]], [8, 8, 8], [frozenset()] * 3)
    for _ in range(3):
        batch.step()
    return batch._logits.float()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_llama_step_gives_the_logits_of_the_model_forward(dtype: torch.dtype) -> None:
    model = _llama(dtype)
    decoder = packed_decoder(model)
    assert decoder is not None
    expected, got = _step_logits(model, None), _step_logits(model, decoder)
    if dtype == torch.float32:
        assert torch.allclose(got, expected, atol=1e-4, rtol=1e-4)
    else:  # bfloat16: rounding in another order, a few units in the last place of logits this size
        assert (got - expected).abs().max() < 0.05 * expected.abs().max()
        assert torch.equal(got.argmax(-1), expected.argmax(-1))


def test_it_follows_weights_changed_between_batches(tiny_model_dir: Path) -> None:
    """The engine's batches after a weight update decode with the new weights: the packed copies are
    rebuilt, not served stale (compared with an engine that runs the model's forward)."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    packed = TransformersEngine(model, TransformersEngineSettings(prefix_cache_tokens=0))
    plain = TransformersEngine(
        model, TransformersEngineSettings(prefix_cache_tokens=0, packed_decoding=False)
    )
    assert packed.decoder is not None and plain.decoder is None
    prompt, greedy = [5, 17, 42, 8], SamplingParams(temperature=0.0, max_tokens=6)

    async def both() -> tuple[list[float], list[float]]:
        return (await packed.generate(prompt, greedy)).logprobs, (
            await plain.generate(prompt, greedy)
        ).logprobs

    async def go() -> tuple[tuple[list[float], list[float]], tuple[list[float], list[float]]]:
        before = await both()
        with packed.changing_weights(), torch.no_grad():
            for parameter in model.parameters():
                if parameter.dim() > 1:
                    parameter.mul_(3)
        after = await both()
        await packed.aclose()
        await plain.aclose()
        return before, after

    before, after = asyncio.run(go())
    for got, expected in (before, after):
        assert torch.allclose(torch.tensor(got), torch.tensor(expected), atol=1e-4)
    assert not torch.allclose(torch.tensor(after[1]), torch.tensor(before[1]), atol=1e-2)


def test_models_whose_forward_is_another_computation_are_not_taken(
    tiny_model_dir: Path, sliding_window_model
) -> None:
    assert packed_decoder(sliding_window_model) is None
    eager_half = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float16)
    assert packed_decoder(eager_half) is None  # float16: oneDNN's packed path is float32/bfloat16 here
    other = _llama()
    other.config.model_type = "gemma"  # RMSNorm as (1 + weight), embeddings scaled: not this computation
    assert packed_decoder(other) is None
    peft = pytest.importorskip("peft")
    wrapped = peft.get_peft_model(_llama(), peft.LoraConfig(r=2, target_modules=["q_proj"]))
    assert packed_decoder(wrapped) is None


def test_the_engine_setting_turns_it_off(tiny_model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    engine = TransformersEngine(model, TransformersEngineSettings(packed_decoding=False))
    assert engine.decoder is None
    asyncio.run(engine.aclose())


def test_weights_replaced_under_the_same_parameters_are_repacked() -> None:
    """`.to(dtype)` and `.data = ...` give a parameter new storage without moving its version counter:
    the copies follow them, and a dtype the packed path does not run turns it off."""
    model = _llama()
    decoder = packed_decoder(model)
    assert decoder is not None and decoder.refresh()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.data = parameter.data * 1.5
    assert decoder.refresh()
    assert torch.allclose(_step_logits(model, decoder), _step_logits(model, None), atol=1e-4, rtol=1e-4)
    model.to(torch.bfloat16)
    assert decoder.refresh()
    got, expected = _step_logits(model, decoder), _step_logits(model, None)
    assert torch.equal(got.argmax(-1), expected.argmax(-1))
    model.to(torch.float16)
    assert not decoder.refresh()


def test_weights_changed_under_changing_weights_are_repacked_even_unseen(tiny_model_dir: Path) -> None:
    """A change the version counters miss (a write through `.data`, as a fused optimizer's) made
    under the engine's `changing_weights` still reaches the next batch."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    packed = TransformersEngine(model, TransformersEngineSettings(prefix_cache_tokens=0))
    plain = TransformersEngine(
        model, TransformersEngineSettings(prefix_cache_tokens=0, packed_decoding=False)
    )
    prompt, greedy = [5, 17, 42, 8], SamplingParams(temperature=0.0, max_tokens=6)

    async def go() -> tuple[list[float], list[float]]:
        await packed.generate(prompt, greedy)  # packs the weights as they are now
        with packed.changing_weights():
            for parameter in model.parameters():
                if parameter.dim() > 1:
                    parameter.data.mul_(3)
        got = (await packed.generate(prompt, greedy)).logprobs
        expected = (await plain.generate(prompt, greedy)).logprobs
        await packed.aclose()
        await plain.aclose()
        return got, expected

    got, expected = asyncio.run(go())
    assert torch.allclose(torch.tensor(got), torch.tensor(expected), atol=1e-4)


def test_a_model_copied_under_inference_mode_decodes_on_it() -> None:
    """Weights made under `torch.inference_mode` (the dtype probe's bfloat16 copy) keep no version
    counter; the decoder still packs them and gives the model's logits."""
    import copy

    model = _llama()
    with torch.inference_mode():
        copied = copy.deepcopy(model)
        decoder = packed_decoder(copied)
        assert decoder is not None
        got = _step_logits(copied, decoder)
    assert torch.allclose(got, _step_logits(model, None), atol=1e-4, rtol=1e-4)
