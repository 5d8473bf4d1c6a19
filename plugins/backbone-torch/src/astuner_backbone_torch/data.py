"""Training tasks (or SFT samples) in batches: a seeded shuffle per epoch, and a position checkpoints hold."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")


class TaskStream(Generic[Item]):
    """Yields `batch_size` items (tasks, or samples for SFT) per step, epoch after epoch.

    Each epoch visits the tasks in an order shuffled by `(seed, epoch)`; a
    partial batch at the end of an epoch is dropped (so every step has the
    same size), unless there are fewer tasks than one batch, in which case
    every batch is the whole (shuffled) set. The position is just
    `(epoch, batch)`, so resuming needs no saved iterator.
    """

    def __init__(self, tasks: Sequence[Item], batch_size: int, seed: int) -> None:
        if not tasks:
            raise ValueError("nothing to train on")
        self.tasks = list(tasks)
        self.batch_size = min(batch_size, len(self.tasks))
        self.seed = seed
        self.epoch = 0
        self.batch = 0

    @property
    def batches_per_epoch(self) -> int:
        return len(self.tasks) // self.batch_size

    def _order(self, epoch: int) -> list[int]:
        order = list(range(len(self.tasks)))
        random.Random(f"astuner-tasks:{self.seed}:{epoch}").shuffle(order)
        return order

    def next_batch(self) -> list[Item]:
        if self.batch >= self.batches_per_epoch:
            self.epoch, self.batch = self.epoch + 1, 0
        order = self._order(self.epoch)
        start = self.batch * self.batch_size
        self.batch += 1
        return [self.tasks[i] for i in order[start : start + self.batch_size]]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batch": self.batch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.batch = int(state["epoch"]), int(state["batch"])
