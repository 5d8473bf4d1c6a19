"""bench/bench_agentic.py's window of steps both sides ran side by side (the TRL / astuner ratio)."""

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _bench_agentic():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("bench_agentic", BENCH / "bench_agentic.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(seconds: float, steps: int) -> list[dict[str, float]]:
    return [{"step_s": seconds} for _ in range(steps)]


def test_the_window_is_the_steps_both_sides_finished_before_the_first_stopped() -> None:
    while_both_ran = _bench_agentic().while_both_ran
    # Same step counts: the slower side finished 7 steps (420 s) while the faster ran its 450 s.
    ours, theirs = while_both_ran(_rows(15.0, 30), _rows(60.0, 30))
    assert (len(ours), len(theirs)) == (7, 7)
    # TRL stopped early (--trl-steps 8, 320 s) though its steps are the slower: 8 steps each, not
    # astuner's 21 steps of those 320 s against TRL's 8.
    ours, theirs = while_both_ran(_rows(15.0, 30), _rows(40.0, 8))
    assert (len(ours), len(theirs)) == (8, 8)


def test_the_update_dtype_is_probed_with_the_run_s_thread_count(monkeypatch) -> None:
    """The probe's verdict is cached per thread count: TRL's bf16 follows astuner's only if the bench
    asks with the thread count the run has (--threads), not the bench process's own."""
    import astuner_backbone_torch.dtype_probe as dtype_probe
    import torch
    import transformers

    seen: list[int] = []

    def probe(model: object) -> torch.dtype:
        seen.append(torch.get_num_threads())
        return torch.bfloat16

    monkeypatch.setattr(dtype_probe, "fastest_cpu_train_dtype", probe)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: object())
    before = torch.get_num_threads()
    assert _bench_agentic().update_in_bf16(Path("model"), threads=1)
    assert seen == [1] and torch.get_num_threads() == before
