"""The trainer's `metrics.jsonl` is strict JSON: a step metric that overflowed is written null."""

from __future__ import annotations

import json
import math
from pathlib import Path

from astuner_backbone_torch.metrics import MetricsLog


def test_a_step_metric_that_overflowed_is_written_null(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path, tensorboard_dir=None)
    log.write(1, {"train/reward_mean": 1.7e308 * 2, "train/reward_std": math.nan, "train/loss": 0.25})
    log.close()

    def refuse(literal: str) -> None:
        raise AssertionError(f"{literal} is not JSON")

    (row,) = [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]
    assert row == {"step": 1, "train/reward_mean": None, "train/reward_std": None, "train/loss": 0.25}
