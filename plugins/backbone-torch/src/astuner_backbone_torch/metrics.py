"""Step metrics: computed from a step's trajectories, written to metrics.jsonl and TensorBoard.

The scoring functions live in the kernel (`astuner.core.metrics`, shared with
`astuner eval`) and are re-exported here under their old names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from astuner.training import append_rows, pass_at_k, rollout_metrics, scalar_reward, succeeded

__all__ = ["MetricsLog", "pass_at_k", "rollout_metrics", "scalar_reward", "succeeded"]


class MetricsLog:
    """One JSON object per step in `metrics.jsonl` (flushed), mirrored to TensorBoard."""

    def __init__(self, path: Path, tensorboard_dir: Path | None) -> None:
        self.path = path
        self.writer: Any = None
        if tensorboard_dir is not None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(tensorboard_dir))

    def write(self, step: int, metrics: dict[str, float]) -> None:
        record = {"step": step, **{k: _plain(v) for k, v in metrics.items()}}
        append_rows(self.path, [record])  # a NaN or infinite value is written null, and warned of
        if self.writer is not None:
            for name, value in metrics.items():
                self.writer.add_scalar(name, float(value), step)
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _plain(value: float) -> float | int:
    if isinstance(value, int):
        return value
    return round(float(value), 6)
