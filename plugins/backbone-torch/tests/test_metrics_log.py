"""The trainer's `metrics.jsonl` is strict JSON (a step metric that overflowed is written null), and
TensorBoard's charts are laid out from the metrics' declarations."""

from __future__ import annotations

import json
import math
from pathlib import Path

from astuner_backbone_torch.metrics import MetricsLog, chart_layout

from astuner.training import Plugins, metric_catalog


def _written_layout(tensorboard_dir: Path) -> tuple[list, dict[str, dict[str, list[str]]]]:
    """The Custom Scalars layouts written to `tensorboard_dir`, and the last one as
    {section: {chart: [metric keys]}} (each tag, anchored at its end, without its `$`)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.custom_scalar import layout_pb2

    events = EventAccumulator(str(tensorboard_dir))
    events.Reload()
    written = events.Tensors("custom_scalars__config__")
    layout = layout_pb2.Layout.FromString(written[-1].tensor_proto.string_val[0])
    tags = [tag for category in layout.category for chart in category.chart for tag in chart.multiline.tag]
    assert all(tag.endswith("$") for tag in tags), "a tag must not also match longer names"
    charts = {
        category.title: {chart.title: [tag[:-1] for tag in chart.multiline.tag] for chart in category.chart}
        for category in layout.category
    }
    return written, charts


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
    catalog = metric_catalog(Plugins(load_entry_points=False))
    log = MetricsLog(tmp_path / "metrics.jsonl", tmp_path / "tb", catalog)
    log.write(1, {"train/reward_mean": 0.5, "actor/grad_norm": 1.0, "my/own": 2.0})
    log.write(2, {"train/reward_mean": 0.6, "val/reward_mean": 0.4, "train/judge/one_hop/correct": 1.0})
    log.close()
    assert chart_layout(["val/reward_mean", "train/reward_mean", "my/own"], catalog) == {
        "reward": {"mean judge reward": ["val/reward_mean", "train/reward_mean"]}
    }

    written, charts = _written_layout(tmp_path / "tb")
    assert charts == {
        "reward": {"mean judge reward": ["train/reward_mean", "val/reward_mean"]},
        "actor": {"gradient norm": ["actor/grad_norm"]},
        "judge": {"one_hop/correct": ["train/judge/one_hop/correct"]},
    }
    assert len(written) == 2, "the layout is written again only when a step brings a new chart"


def test_tensorboard_has_a_section_per_agent_with_its_judge_metrics(tmp_path: Path) -> None:
    """Each agent's reward, win rate, calls, tokens and the judge's numbers of it (`agent/<agent>/<metric>`
    from the judge) are one section, each chart with the agent's splits together."""
    catalog = metric_catalog(Plugins(load_entry_points=False))
    log = MetricsLog(tmp_path / "metrics.jsonl", tmp_path / "tb", catalog)
    for step in (1, 2):
        row = {}
        for split in ("train", "val"):
            for agent in ("wolf", "seer"):
                for name in ("reward_mean", "win_rate", "calls_mean", "response_tokens_mean"):
                    row[f"{split}/agent/{agent}/{name}"] = 0.5 * step
            row[f"{split}/agent/wolf/judge/fallback_share"] = 1.0 / step
            row[f"{split}/judge/village_won"] = 0.5
        log.write(step, row)
    log.close()

    _, charts = _written_layout(tmp_path / "tb")
    assert list(charts) == ["agent: wolf", "agent: seer", "judge"]
    assert charts["agent: wolf"] == {
        "wolf: mean judge reward": ["train/agent/wolf/reward_mean", "val/agent/wolf/reward_mean"],
        "wolf: win rate": ["train/agent/wolf/win_rate", "val/agent/wolf/win_rate"],
        "wolf: model calls per episode": ["train/agent/wolf/calls_mean", "val/agent/wolf/calls_mean"],
        "wolf: response tokens per episode": [
            "train/agent/wolf/response_tokens_mean",
            "val/agent/wolf/response_tokens_mean",
        ],
        "wolf: fallback_share": [
            "train/agent/wolf/judge/fallback_share",
            "val/agent/wolf/judge/fallback_share",
        ],
    }
    assert list(charts["agent: seer"]) == [
        "seer: mean judge reward",
        "seer: win rate",
        "seer: model calls per episode",
        "seer: response tokens per episode",
    ]
    assert charts["judge"] == {"village_won": ["train/judge/village_won", "val/judge/village_won"]}
