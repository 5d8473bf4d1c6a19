"""Checkpoints: written atomically, found by resume=auto, refused when incomplete."""

import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from astuner_backbone_torch.backbone import TorchBackbone  # noqa: E402
from astuner_backbone_torch.checkpoint import (  # noqa: E402
    latest_checkpoint,
    read_checkpoint,
    resume_from,
    rng_state,
    save_checkpoint,
    set_rng_state,
)

from astuner.config import load_config  # noqa: E402
from astuner.errors import AstunerError, ConfigError  # noqa: E402
from astuner.training import AgentPlan, FindsCheckpoints  # noqa: E402


def _save(root: Path, step: int, marker: str = "m") -> Path:
    return save_checkpoint(
        root,
        step,
        save_model=lambda folder: (folder / "model.txt").write_text(marker),
        tensors={"rng": rng_state()},
        state={"data": {"epoch": 0, "batch": step}},
    )


def test_save_writes_a_complete_folder_and_leaves_no_temporary_ones(tmp_path: Path) -> None:
    path = _save(tmp_path / "checkpoints", 3)
    assert path.name == "step_3"
    assert sorted(p.name for p in path.iterdir()) == ["model.txt", "trainer_state.json", "trainer_state.pt"]
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step_3"]
    ckpt = read_checkpoint(path)
    assert ckpt is not None and ckpt.step == 3 and ckpt.state["data"]["batch"] == 3
    # Saving the same step again replaces it whole.
    _save(tmp_path / "checkpoints", 3, marker="again")
    assert (path / "model.txt").read_text() == "again"
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step_3"]


def test_a_failed_save_leaves_nothing_that_looks_like_a_checkpoint(tmp_path: Path) -> None:
    def explode(folder: Path) -> None:
        (folder / "model.txt").write_text("half")
        raise OSError("disk full")

    expected = rf"Cannot write the checkpoint '{tmp_path / 'step_5'}': disk full"
    with pytest.raises(AstunerError, match=expected):
        save_checkpoint(tmp_path, 5, save_model=explode, tensors={}, state={})
    assert list(tmp_path.iterdir()) == []


def test_the_backbone_says_where_its_latest_checkpoint_is(tmp_path: Path) -> None:
    """The kernel asks the backbone (eval's --checkpoint latest, the closing lines, tune()'s result)."""
    _save(tmp_path / "run1" / "checkpoints", 3)
    _save(tmp_path / "run2" / "checkpoints", 7)
    backbone = TorchBackbone()
    assert isinstance(backbone, FindsCheckpoints)
    assert backbone.latest_checkpoint([tmp_path / "run1"]) == tmp_path / "run1" / "checkpoints" / "step_3"
    assert backbone.latest_checkpoint(tmp_path.glob("run*")) == tmp_path / "run2" / "checkpoints" / "step_7"
    assert backbone.latest_checkpoint([tmp_path / "run3"]) is None


def test_latest_checkpoint_skips_half_written_folders_across_runs(tmp_path: Path) -> None:
    experiment = tmp_path / "launcher_record" / "exp"
    _save(experiment / "run1" / "checkpoints", 2)
    _save(experiment / "run2" / "checkpoints", 4)
    # A run killed while saving step 6: the temporary folder, or a folder without its state file.
    (experiment / "run2" / "checkpoints" / ".step_6-abc").mkdir()
    half = experiment / "run2" / "checkpoints" / "step_6"
    half.mkdir()
    (half / "model.safetensors").write_text("partial")
    latest = latest_checkpoint(experiment.glob("*"))
    assert latest is not None and latest.step == 4 and latest.path.parent.parent.name == "run2"

    (experiment / "run2" / "checkpoints" / ".old-step_4").mkdir()  # killed while replacing step 4
    assert resume_from("auto", experiment).step == 4
    left = sorted(p.name for p in (experiment / "run2" / "checkpoints").iterdir())
    assert left == ["step_4", "step_6"]  # the partial saves are gone; a folder named like a step stays
    assert resume_from("disable", experiment) is None
    with pytest.raises(ConfigError, match="not a complete checkpoint"):
        resume_from(str(half), experiment)


def test_rng_state_round_trips() -> None:
    state = rng_state()
    first = torch.rand(3)
    set_rng_state(state)
    assert torch.equal(torch.rand(3), first)


class _RunsCode:
    """A pickle payload: unpickling it would call os.system."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_resuming_never_unpickles_code(tmp_path: Path) -> None:
    path = _save(tmp_path / "checkpoints", 1)
    ckpt = read_checkpoint(path)
    assert ckpt is not None
    state = ckpt.tensors()  # what astuner writes loads under weights_only=True
    set_rng_state(state["rng"])
    marker = tmp_path / "pwned"
    torch.save({"rng": _RunsCode(marker)}, path / "trainer_state.pt")
    with pytest.raises(AstunerError, match=r"Cannot read the trainer state '.*trainer_state.pt'"):
        ckpt.tensors()
    assert not marker.exists()


def test_corrupt_weights_name_the_folder(tmp_path: Path, tiny_model_dir: Path) -> None:
    from astuner_backbone_torch.policy import Policy
    from astuner_backbone_torch.settings import TorchSettings

    broken = tmp_path / "step_3"
    shutil.copytree(tiny_model_dir, broken)
    weights_file = broken / "model.safetensors"
    weights_file.write_bytes(weights_file.read_bytes()[:100])  # truncated, as by a full disk
    config = load_config(None, [f"model.path={tiny_model_dir}"], environ={})
    with pytest.raises(AstunerError, match=rf"Cannot load the model weights in '{broken}'"):
        Policy.load(config.model, TorchSettings(), plan=AgentPlan(), need_reference=False, weights=broken)


def test_a_save_the_disk_cannot_hold_is_refused_before_it_starts(tmp_path: Path, monkeypatch) -> None:
    from astuner_backbone_torch import checkpoint

    weights = [torch.zeros(1024, 256)]  # 1 MiB of float32
    needed = checkpoint.checkpoint_bytes(weights + weights, weights)  # a tied copy counts once
    assert needed == 3 << 20  # the weights, and AdamW's two moments
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(checkpoint.shutil, "disk_usage", lambda path: usage._replace(free=18 << 20))
    root = tmp_path / "run" / "checkpoints"
    with pytest.raises(AstunerError, match=rf"in '{root}': it needs about 19 MB, 18 MB is free"):
        checkpoint.ensure_space(root, needed)
    assert not root.exists()
    checkpoint.ensure_space(root, 1 << 20)


def test_keep_last_checkpoints_prunes_the_oldest_complete_ones(tmp_path: Path) -> None:
    from astuner_backbone_torch.checkpoint import prune_checkpoints

    root = tmp_path / "checkpoints"
    for step in (1, 2, 3, 4):
        _save(root, step)
    assert prune_checkpoints(root, None) == []
    removed = prune_checkpoints(root, 2)
    assert [p.name for p in removed] == ["step_1", "step_2"]
    assert sorted(p.name for p in root.iterdir()) == ["step_3", "step_4"]
