"""Loading the model for rollouts (debug looks, eval, training) prints no Hugging Face progress bar."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from astuner_backbone_torch.engine import TransformersEngine
from astuner_backbone_torch.settings import TransformersEngineSettings
from transformers.utils import logging as hf_logging

from astuner.api import EngineModel


def test_serving_a_model_prints_no_loading_bar(
    tiny_model_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    hf_logging.enable_progress_bar()  # as in a fresh process: another test may have turned it off
    engine = TransformersEngine.serving(TransformersEngineSettings(), EngineModel(path=str(tiny_model_dir)))
    assert engine.tokenizer_path == str(tiny_model_dir)
    captured = capfd.readouterr()
    assert "Loading weights" not in captured.err + captured.out
