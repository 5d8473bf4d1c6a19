"""A private Ray head for the executor's tests, and the plugin added to the tests' plugin manager."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from astuner_executor_ray import plugin

from astuner.plugins import Plugins
from astuner.ray_cluster import RayHead


@pytest.fixture(scope="module")
def ray_head() -> Iterator[RayHead]:
    """A Ray head of our own for one test module (private temp dir, stopped by its PID)."""
    ray = pytest.importorskip("ray")
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent))
    if ray_bin is None:
        pytest.skip("the ray executable is not installed next to this Python")
    # The executor joins a Ray this process already started: one left by an earlier test would run
    # these tests' workflows instead, in a cluster whose working directory may be gone.
    assert not ray.is_initialized(), "an earlier test in this process left Ray initialized"
    with RayHead(ray_bin, num_cpus=2) as head:
        yield head
        ray.shutdown()


@pytest.fixture
def ray_plugins(plugins: Plugins) -> Plugins:
    """The kernel's defaults and this plugin only, whatever else is installed."""
    plugins.add(plugin, name="executor_ray")
    return plugins
