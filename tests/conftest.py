"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from astuner.plugins import Plugins


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
