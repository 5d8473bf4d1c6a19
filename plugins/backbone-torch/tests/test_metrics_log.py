"""The trainer's `metrics.jsonl` is strict JSON (a step metric that overflowed is written null), and
TensorBoard's charts are laid out from the metrics' declarations."""

from __future__ import annotations

import json
import math
from pathlib import Path

from astuner_backbone_torch.metrics import MetricsLog, chart_layout

from astuner.training import Plugins, metric_catalog


def test_a_step_metric_that_overflowed_is_written_null(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path, tensorboard_dir=None)
    log.write(1, {"train/reward_mean": 1.7e308 * 2, "train/reward_std": math.nan, "train/loss": 0.25})
    log.close()

    def refuse(literal: str) -> None:
        raise AssertionError(f"{literal} is not JSON")

    (row,) = [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]
    assert row == {"step": 1, "train/reward_mean": None, "train/reward_std": None, "train/loss": 0.25}


def test_tensorboard_charts_are_laid_out_by_the_declarations(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.custom_scalar import layout_pb2

    catalog = metric_catalog(Plugins(load_entry_points=False))
    log = MetricsLog(tmp_path / "metrics.jsonl", tmp_path / "tb", catalog)
    log.write(1, {"train/reward_mean": 0.5, "actor/grad_norm": 1.0, "my/own": 2.0})
    log.write(2, {"train/reward_mean": 0.6, "val/reward_mean": 0.4, "train/judge/one_hop/correct": 1.0})
    log.close()
    assert chart_layout(["val/reward_mean", "train/reward_mean", "my/own"], catalog) == {
        "reward": {"mean judge reward": ["val/reward_mean", "train/reward_mean"]}
    }

    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    written = events.Tensors("custom_scalars__config__")
    layout = layout_pb2.Layout.FromString(written[-1].tensor_proto.string_val[0])
    charts = {
        category.title: {chart.title: list(chart.multiline.tag) for chart in category.chart}
        for category in layout.category
    }
    assert charts == {
        "reward": {"mean judge reward": ["train/reward_mean", "val/reward_mean"]},
        "actor": {"gradient norm": ["actor/grad_norm"]},
        "judge": {"one_hop/correct": ["train/judge/one_hop/correct"]},
    }
    assert len(written) == 2, "the layout is written again only when a step brings a new chart"
