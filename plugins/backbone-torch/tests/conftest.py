"""Fixtures shared by backbone-torch's tests (the tiny models themselves come from astuner.testing)."""

from pathlib import Path

import pytest


@pytest.fixture
def sliding_window_model(tiny_model_dir: Path):
    """The tiny Qwen2 with every layer attending to a window of 3 tokens: a model neither the slot
    cache nor the packed decoder takes."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        tiny_model_dir,
        dtype=torch.float32,
        use_sliding_window=True,
        sliding_window=3,
        max_window_layers=0,
        layer_types=["sliding_attention", "sliding_attention"],
    ).eval()
