"""Threads on a busy machine: the engine takes the cores other processes leave free, and says so.

Each case runs in a fresh Python (torch reads OMP_NUM_THREADS once, and the
choice is kept per process), with the environment this test sets: the
suite's own OMP_NUM_THREADS (conftest.py, per xdist worker) is removed
where the measured choice is what the case is about.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from astuner_backbone_torch.threads import ThreadChoice, busy_cores, free_threads

CORES = len(os.sched_getaffinity(0))

ENGINE_THREADS = """
import json, sys, torch
from transformers import AutoModelForCausalLM
from astuner_backbone_torch.engine import TransformersEngine
from astuner_backbone_torch.settings import TransformersEngineSettings
settings = TransformersEngineSettings(**json.loads(sys.argv[2]))
TransformersEngine(AutoModelForCausalLM.from_pretrained(sys.argv[1]), settings)
print("THREADS", torch.get_num_threads())
"""


def _engine_threads(model: Path, env: dict[str, str], **settings: object) -> tuple[int, str]:
    """torch's thread count after an engine is built in a fresh process, and what that process logged."""
    done = subprocess.run(
        [sys.executable, "-c", ENGINE_THREADS, str(model), json.dumps(settings)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    threads = int(done.stdout.split("THREADS")[-1])
    return threads, done.stdout + done.stderr


def _without_omp() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}


@pytest.fixture
def every_core_busy() -> Iterator[None]:
    """One spinning process per core, stopped by the PIDs started here."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(CORES)]
    try:
        time.sleep(1.0)
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


@pytest.mark.skipif(CORES < 2, reason="one core: one thread either way")
def test_a_busy_machine_gets_fewer_threads_and_is_told_what_to_set(
    tiny_model_dir: Path, every_core_busy: None
) -> None:
    assert (busy_cores(os.sched_getaffinity(0)) or 0.0) > CORES - 1.5
    threads, out = _engine_threads(tiny_model_dir, _without_omp())
    assert threads < CORES
    assert f"threads: {threads} of {CORES} cores: other processes kept" in out
    assert "Set rollout.engines.transformers.num_threads to choose" in out


def test_a_setting_or_omp_num_threads_wins_over_the_measurement(tiny_model_dir: Path) -> None:
    threads, out = _engine_threads(tiny_model_dir, _without_omp(), num_threads=3)
    assert threads == 3
    assert f"threads: 3 of {CORES} cores (rollout.engines.transformers.num_threads)" in out
    threads, out = _engine_threads(tiny_model_dir, {**_without_omp(), "OMP_NUM_THREADS": "1"})
    assert threads == 1
    assert "(OMP_NUM_THREADS; rollout.engines.transformers.num_threads overrides it)" in out


def test_the_free_cores_are_rounded_and_never_zero() -> None:
    assert free_threads(2, 0.0) == 2
    assert free_threads(2, 0.4) == 2
    assert free_threads(2, 0.6) == 1
    assert free_threads(2, 2.0) == 1
    assert free_threads(16, 9.7) == 6
    quiet = ThreadChoice(threads=2, cores=2, source="measured", busy_cores=0.2)
    assert "the machine was free at start" in quiet.sentence("torch.num_threads")
    kept_all = ThreadChoice(threads=16, cores=16, source="measured", busy_cores=0.5)  # rounds to no core
    assert "the machine was free at start" in kept_all.sentence("torch.num_threads")


@pytest.fixture
def quiet_process(monkeypatch) -> Iterator[None]:
    """This process as if just started on a quiet machine (no OMP_NUM_THREADS, no choice made yet,
    no core busy); torch's thread count is restored after."""
    import torch
    from astuner_backbone_torch import threads

    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "busy_cores", lambda cpus: 0.0)
    monkeypatch.setattr(threads, "_measured", None)
    monkeypatch.setattr(threads, "_announced", None)
    monkeypatch.setattr(threads, "_torch_default", None)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(CORES < 2, reason="one core: one thread either way")
def test_a_quiet_machine_keeps_torchs_own_count_not_every_logical_core(quiet_process) -> None:
    """torch's default is one thread per physical core; with two hardware threads a core, the quiet
    machine's free logical cores are twice that, and so many threads slow torch down."""
    import torch
    from astuner_backbone_torch import threads

    torch.set_num_threads(CORES // 2)  # as torch starts on a machine with two hardware threads a core
    choice = threads.use_threads(None, "torch.num_threads")
    assert (choice.threads, torch.get_num_threads()) == (CORES // 2, CORES // 2)
    assert "the machine was free at start" in choice.sentence("torch.num_threads")


@pytest.mark.skipif(CORES < 2, reason="one core: one thread either way")
def test_an_engine_without_a_setting_keeps_the_count_the_trainer_was_set_to(quiet_process) -> None:
    """A torch run sets torch.num_threads, then builds its in-process engine, whose own key is unset:
    torch's count is one per process, and the engine must not measure it back up."""
    import torch
    from astuner_backbone_torch import threads

    torch.set_num_threads(CORES)
    threads.use_threads(1, "torch.num_threads")
    choice = threads.use_threads(None, "rollout.engines.transformers.num_threads")
    assert (choice.source, choice.threads, torch.get_num_threads()) == ("setting", 1, 1)
