"""The workspace's tests (kernel/tests, plugins/*/tests, tests/): shared fixtures and isolation."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

pytest_plugins = ["astuner.testing.pytest_plugin"]


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each worker's torch (and the astuner processes its tests start) gets its
    share of the cores: two workers each running torch on every core oversubscribe them, and
    OpenMP's spinning threads then make a SmolLM2 run several times slower."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // int(workers)))


@pytest.fixture(autouse=True)
def _clean_astuner_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test sees the developer's ASTUNER__* settings or plugin narrowing. ASTUNER_CACHE stays: it says
    where converted models are, and a run in a test would otherwise convert SmolLM2 again elsewhere, and
    name it by another folder than a server that session fixtures started on it."""
    for name in list(os.environ):
        if name.upper().startswith("ASTUNER_") and name != "ASTUNER_CACHE":
            monkeypatch.delenv(name)
    yield
