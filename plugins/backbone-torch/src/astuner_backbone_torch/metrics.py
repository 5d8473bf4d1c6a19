"""Step metrics: computed from a step's trajectories, written to metrics.jsonl and TensorBoard.

The scoring functions live in the kernel (`astuner.core.metrics`, shared with
`astuner eval`) and are re-exported here under their old names. TensorBoard's
Custom Scalars tab is laid out from the metrics' declarations
(`register_metrics`): a section per group, a chart per declared metric with
its splits drawn together (train and validation reward in one chart), each
judge metric a chart of its own under "judge", and a section per agent of a
multi-agent workflow ("agent: wolf": its reward, win rate, calls, tokens and
the judge's numbers of it).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from astuner.training import (
    MetricCatalog,
    append_rows,
    pass_at_k,
    rollout_metrics,
    scalar_reward,
    succeeded,
)

__all__ = ["MetricsLog", "chart_layout", "pass_at_k", "rollout_metrics", "scalar_reward", "succeeded"]


def chart_layout(keys: list[str], catalog: MetricCatalog) -> dict[str, dict[str, list[str]]]:
    """group -> chart title (the metric's label) -> the keys drawn in it, for the declared `keys`.

    Keys nothing declares are left out (TensorBoard's Scalars tab still
    shows them).
    """
    layout: dict[str, dict[str, list[str]]] = {}
    for key in keys:
        resolved = catalog.resolve(key)
        if resolved is None:
            continue
        group = resolved["group"] or "other"
        layout.setdefault(group, {}).setdefault(resolved["label"], []).append(key)
    return layout


class MetricsLog:
    """One JSON object per step in `metrics.jsonl` (flushed), mirrored to TensorBoard.

    With a `catalog` (the run's `metric_catalog(plugins)`), TensorBoard also
    gets the chart layout of `chart_layout`, written again whenever a step
    brings a metric no chart had yet (a judge's new number, say).
    """

    def __init__(
        self, path: Path, tensorboard_dir: Path | None, catalog: MetricCatalog | None = None
    ) -> None:
        self.path = path
        self.catalog = catalog
        self.writer: Any = None
        self._keys: list[str] = []
        self._layout: dict[str, dict[str, list[str]]] = {}
        if tensorboard_dir is not None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(tensorboard_dir))

    def write(self, step: int, metrics: dict[str, float]) -> None:
        record = {"step": step, **{k: _plain(v) for k, v in metrics.items()}}
        append_rows(self.path, [record])  # a NaN or infinite value is written null, and warned of
        if self.writer is not None:
            for name, value in metrics.items():
                self.writer.add_scalar(name, float(value), step)
            self._update_layout(metrics)
            self.writer.flush()

    def _update_layout(self, metrics: dict[str, float]) -> None:
        new = [key for key in metrics if key not in self._keys]
        if self.catalog is None or not new:
            return
        self._keys += new
        layout = chart_layout(self._keys, self.catalog)
        if layout != self._layout:
            self._layout = layout
            # a chart's tags are regular expressions matched at the start of a name: anchored at the end
            # too, `train/judge/x` does not also draw `train/judge/x_share`
            charts = {
                group: {
                    title: ["Multiline", [f"{re.escape(k)}$" for k in keys]] for title, keys in titles.items()
                }
                for group, titles in layout.items()
            }
            self.writer.add_custom_scalars(charts)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _plain(value: float) -> float | int:
    if isinstance(value, int):
        return value
    return round(float(value), 6)
