"""Fixtures for the `astuner.tune()` tests."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from tuner_parts import CapturingEngine, write_dataset

from astuner import hookimpl
from astuner.core.tokenizer import ChatTokenizer
from astuner.plugins import Plugins
from astuner.testing.tokenizers import qwen25_tokenizer


@pytest.fixture
def dataset_dir(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "my_dataset")


@pytest.fixture
def scripted(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Every installed plugin plus engine `scripted` (always answers "4"); `.engines`: those built."""
    tokenizer_dir = tmp_path_factory.mktemp("tokenizer")
    qwen25_tokenizer().save_pretrained(tokenizer_dir)
    built: list[CapturingEngine] = []

    def make_engine(model) -> CapturingEngine:
        engine = CapturingEngine(ChatTokenizer(qwen25_tokenizer()), "4")
        engine.tokenizer_path = str(tokenizer_dir)
        built.append(engine)
        return engine

    def register_engines(register) -> None:
        register("scripted", make_engine)

    plugins = Plugins()
    plugins.add(SimpleNamespace(register_engines=hookimpl(register_engines)), name="scripted_engine")
    return SimpleNamespace(plugins=plugins, engines=built, tokenizer_dir=tokenizer_dir)
