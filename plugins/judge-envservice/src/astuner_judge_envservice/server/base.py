"""What a reference-server environment is: a `Game` that makes `Episode`s.

Task ids are deterministic per split (`<split>-<index>`), and each task's
puzzle is derived from a hash of the game name and the task id, so every
run of every server agrees on what task `train-0007` is.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, ClassVar

SPLIT_SIZES = {"train": 1000, "dev": 100, "test": 100}
SPLIT_ALIASES = {"validation": "dev", "val": "dev"}


class BadRequest(ValueError):
    """A request the server cannot serve; answered with HTTP 400 and this message."""


@dataclass
class StepResult:
    observation: str
    reward: float
    terminated: bool
    info: dict[str, Any] = field(default_factory=dict)


class Episode:
    """One instance: its opening messages, its steps, its score."""

    def initial_state(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def step(self, text: str) -> StepResult:
        raise NotImplementedError

    def score(self, sparse: bool) -> float:
        raise NotImplementedError

    def info(self) -> dict[str, Any]:
        raise NotImplementedError


class Game:
    """An environment type: task ids per split, and episodes of a task."""

    name: ClassVar[str]

    def task_ids(self, split: str) -> list[str]:
        split = SPLIT_ALIASES.get(split, split)
        if split not in SPLIT_SIZES:
            raise BadRequest(
                f"unknown split '{split}' for {self.name}: use one of "
                f"{', '.join([*SPLIT_SIZES, *SPLIT_ALIASES])}"
            )
        return [f"{split}-{i:04d}" for i in range(SPLIT_SIZES[split])]

    def rng(self, task_id: str) -> random.Random:
        split, _, index = task_id.rpartition("-")
        if SPLIT_ALIASES.get(split, split) not in SPLIT_SIZES or not index.isdigit():
            raise BadRequest(f"unknown task id '{task_id}' for {self.name}: ids look like 'train-0007'")
        if int(index) >= SPLIT_SIZES[SPLIT_ALIASES.get(split, split)]:
            raise BadRequest(f"unknown task id '{task_id}' for {self.name}: index out of range")
        seed = hashlib.sha256(f"{self.name}:{task_id}".encode()).digest()
        return random.Random(int.from_bytes(seed[:8], "big"))

    def episode(self, task_id: str, params: dict[str, Any]) -> Episode:
        raise NotImplementedError
