"""Fixtures of the kernel's tests."""

from types import SimpleNamespace

import pytest

from astuner import hookimpl
from astuner.cli import make_app
from astuner.core.tokenizer import ChatTokenizer
from astuner.testing.engines import ScriptedEngine
from astuner.testing.tokenizers import qwen25_tokenizer


@pytest.fixture
def scripted_app(plugins, tmp_path_factory):
    """The CLI with engine `scripted`: a Qwen2.5-template engine that answers "13" to everything."""
    tokenizer_dir = tmp_path_factory.mktemp("tok")
    qwen25_tokenizer().save_pretrained(tokenizer_dir)

    def make_engine(model):
        engine = ScriptedEngine(ChatTokenizer(qwen25_tokenizer()), lambda prompt: "13")
        engine.tokenizer_path = str(tokenizer_dir)
        return engine

    def register_engines(register):
        register("scripted", make_engine)

    plugins.add(SimpleNamespace(register_engines=hookimpl(register_engines)), name="scripted_engine")
    return make_app(plugins)
