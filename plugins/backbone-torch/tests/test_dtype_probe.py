"""gen_dtype and train_dtype auto on a CPU: the faster dtype for decoding and for the update, measured
once per machine and remembered."""

from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

import astuner_backbone_torch.dtype_probe as probe  # noqa: E402
import astuner_backbone_torch.policy as policy_module  # noqa: E402
from structlog.testing import capture_logs  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402


@pytest.fixture
def tiny_model(tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ASTUNER_CACHE", str(tmp_path / "cache"))
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def test_the_probe_decodes_for_real_and_remembers_its_verdict(tiny_model, monkeypatch) -> None:
    chosen = probe.fastest_cpu_dtype(tiny_model)
    assert chosen in (torch.float32, torch.bfloat16)
    (entry,) = probe._read(probe.probe_cache_file()).values()
    assert entry["float32_s"] > 0 and entry["bfloat16_s"] > 0 and entry["dtype"] == str(chosen)[6:]

    def measuring_again(*args, **kwargs):
        raise AssertionError("the cached verdict should have been used")

    monkeypatch.setattr(probe, "decode_seconds", measuring_again)
    assert probe.fastest_cpu_dtype(tiny_model) == chosen


@pytest.mark.parametrize(
    ("bf16_share", "expected"),
    [(0.5, torch.bfloat16), (0.95, torch.float32), (1.3, torch.float32)],
)
def test_bfloat16_is_chosen_only_when_clearly_faster(tiny_model, monkeypatch, bf16_share, expected) -> None:
    def timed(model, *args, **kwargs):
        return bf16_share if next(model.parameters()).dtype == torch.bfloat16 else 1.0

    monkeypatch.setattr(probe, "decode_seconds", timed)
    assert probe.fastest_cpu_dtype(tiny_model) == expected
    assert probe.fastest_cpu_dtype(tiny_model) == expected  # and from the cache


def test_another_model_shape_is_measured_again(tiny_model, tiny_model_dir, monkeypatch) -> None:
    other = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32, num_hidden_layers=1)
    assert probe.machine_key(tiny_model) != probe.machine_key(other)


# train_dtype auto on a CPU: forward and backward timed in float32 and under bfloat16 autocast.


class ShapeOnly:
    """Stands in for a model where only its shape is read (the cache key)."""

    def __init__(self, layers: int = 2) -> None:
        self.config = SimpleNamespace(to_diff_dict=lambda: {"num_hidden_layers": layers})


@pytest.fixture
def measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[torch.dtype]:
    """The dtypes an `injected` timing was asked for (the probes' cache in tmp_path)."""
    monkeypatch.setenv("ASTUNER_CACHE", str(tmp_path / "cache"))
    return []


def injected(measured: list[torch.dtype], bf16_share: float):
    """An `update_seconds` that answers 1.0 for float32 and `bf16_share` for bfloat16."""

    def timed(model, dtype, *args, **kwargs):
        measured.append(dtype)
        return bf16_share if dtype == torch.bfloat16 else 1.0

    return timed


@pytest.mark.parametrize(
    ("bf16_share", "expected"),
    [(0.5, torch.bfloat16), (0.89, torch.bfloat16), (0.95, torch.float32), (1.3, torch.float32)],
)
def test_bfloat16_autocast_trains_only_when_clearly_faster(
    measured, monkeypatch, bf16_share, expected
) -> None:
    monkeypatch.setattr(probe, "update_seconds", injected(measured, bf16_share))
    with capture_logs() as logs:
        assert probe.fastest_cpu_train_dtype(ShapeOnly()) == expected
    assert measured == [torch.float32, torch.bfloat16] * probe.TRAIN_PASSES  # in turn
    (line,) = [x for x in logs if x["event"].startswith("update dtype")]
    assert line["event"] == "update dtype probed"
    assert line["chosen"] == str(expected)[6:]
    assert line["float32_s_per_micro_batch"] == 1.0 and line["bfloat16_s_per_micro_batch"] == bf16_share
    (entry,) = probe._read(probe.probe_cache_file("train_dtype")).values()
    assert entry["dtype"] == str(expected)[6:] and entry["bfloat16_s"] == bf16_share
    assert not probe.probe_cache_file("gen_dtype").exists()  # the decoding verdict is another one


def test_the_update_verdict_is_cached_per_model_shape(measured, monkeypatch) -> None:
    monkeypatch.setattr(probe, "update_seconds", injected(measured, 0.5))
    assert probe.fastest_cpu_train_dtype(ShapeOnly()) == torch.bfloat16
    monkeypatch.setattr(probe, "update_seconds", injected(measured, 2.0))
    with capture_logs() as logs:
        assert probe.fastest_cpu_train_dtype(ShapeOnly()) == torch.bfloat16  # remembered, not measured
    assert len(measured) == 2 * probe.TRAIN_PASSES
    (line,) = [x for x in logs if x["event"].startswith("update dtype")]
    assert line["event"] == "update dtype cached" and line["bfloat16_s_per_micro_batch"] == 0.5
    assert probe.fastest_cpu_train_dtype(ShapeOnly(layers=3)) == torch.float32  # another shape: measured
    assert len(measured) == 4 * probe.TRAIN_PASSES
    assert len(probe._read(probe.probe_cache_file("train_dtype"))) == 2


def test_only_auto_on_a_cpu_asks_the_update_probe(monkeypatch) -> None:
    asked: list[object] = []
    monkeypatch.setattr(policy_module, "fastest_cpu_train_dtype", lambda m: asked.append(m) or torch.bfloat16)
    monkeypatch.setattr(policy_module, "native_bf16", lambda device: True)
    cpu, gpu, model = torch.device("cpu"), torch.device("cuda"), ShapeOnly()
    assert policy_module.training_dtype("float32", cpu, model) == torch.float32
    assert policy_module.training_dtype("bfloat16", cpu, model) == torch.bfloat16
    assert policy_module.training_dtype("auto", gpu, model) == torch.bfloat16
    assert asked == []
    assert policy_module.training_dtype("auto", cpu, model) == torch.bfloat16
    assert asked == [model]


def test_an_update_pass_is_timed_for_real_and_leaves_no_gradients(tiny_model) -> None:
    for dtype in (torch.float32, torch.bfloat16):
        assert probe.update_seconds(tiny_model, dtype, rows=2, tokens=16) > 0
    assert all(p.grad is None for p in tiny_model.parameters())
