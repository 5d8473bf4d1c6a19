"""What one optimizer owns, and what an update measures.

A `Learner` is AdamW, its learning-rate schedule and its count of
non-finite updates in a row, over one set of weights: the policy's
trainable weights, or, with per-agent adapters (`adapters`), one agent's
adapter. Each adapter has a learner of its own, so one agent's gradients
never move another's moments and an agent without samples in a step
leaves its adapter, moments and schedule as they were.

`UpdateStats` is what one learner's update measured; those of several
learners add up to the step's totals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from astuner.api import AstunerError, get_logger

# Per-update counts that add up over micro-batches, and over learners.
COUNTS = ("loss", "micro_batches", "padded_tokens", "real_tokens", "skipped_samples", "skipped_updates")


class Learner:
    """AdamW and its schedule over `parameters`; `name`: whose they are, in messages (None: the policy's)."""

    def __init__(
        self,
        parameters: Sequence[torch.nn.Parameter],
        *,
        lr: float,
        weight_decay: float,
        warmup_steps: int,
        max_nonfinite: int,
        name: str | None = None,
    ) -> None:
        self.parameters = list(parameters)
        self.name = name
        self.max_nonfinite = max_nonfinite
        self.nonfinite_in_row = 0
        self.optimizer = torch.optim.AdamW(self.parameters, lr=lr, weight_decay=weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / warmup_steps) if warmup_steps else 1.0
        )

    def step(self, grad_clip: float) -> float | None:
        """Clip the accumulated gradient and take an optimizer step; its norm, or None when it was NaN or
        infinite (the step is skipped, and too many in a row stop the run)."""
        for p in self.parameters:
            if p.grad is None:  # nothing carried a gradient: AdamW still steps, as with zeros
                p.grad = torch.zeros_like(p)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.parameters, grad_clip))
        if not math.isfinite(grad_norm):  # a NaN/inf loss or gradient: never step on it
            self._skip_nonfinite(grad_norm)
            return None
        self.nonfinite_in_row = 0
        self.optimizer.step()
        return grad_norm

    def _skip_nonfinite(self, grad_norm: float) -> None:
        """Drop this optimizer step's gradient; stop the run after too many in a row."""
        self.optimizer.zero_grad(set_to_none=True)
        self.nonfinite_in_row += 1
        whose = {"adapter": self.name} if self.name is not None else {}
        get_logger().warning(
            "non-finite gradient: optimizer step skipped",
            grad_norm=grad_norm,
            in_a_row=self.nonfinite_in_row,
            **whose,
        )
        if self.nonfinite_in_row >= self.max_nonfinite:
            where = f" of agent {self.name}'s adapter" if self.name is not None else ""
            raise AstunerError(
                f"The loss or gradient{where} was NaN or infinite in {self.max_nonfinite} optimizer steps in "
                "a row (torch.max_nonfinite_updates); the run stops before the weights are harmed. Look for "
                "non-finite log-probs or rewards in the last steps' records, or lower the learning rate."
            )

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


class Totals:
    """Token-weighted sums of per-token statistics over a step."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.tokens = 0.0

    def add(self, mask: torch.Tensor, **values: torch.Tensor) -> None:
        self.tokens += float(mask.sum())
        for name, value in values.items():
            self.sums[name] = self.sums.get(name, 0.0) + float((value.detach() * mask).sum())

    def merge(self, other: Totals) -> None:
        self.tokens += other.tokens
        for name, total in other.sums.items():
            self.sums[name] = self.sums.get(name, 0.0) + total

    def means(self) -> dict[str, float]:
        return {name: total / self.tokens if self.tokens else 0.0 for name, total in self.sums.items()}


class Mismatch:
    """How far the engine's log-probs are from the trainer's, on the same sampled tokens, at the
    weights the update started from (both should be the same policy)."""

    def __init__(self) -> None:
        self.tokens = 0.0
        self.abs_gap = 0.0
        self.max_gap = 0.0
        self.kl = 0.0

    def add(self, trainer: torch.Tensor, engine: torch.Tensor, mask: torch.Tensor) -> None:
        gap = (engine - trainer) * mask
        self.tokens += float(mask.sum())
        self.abs_gap += float(gap.abs().sum())
        self.max_gap = max(self.max_gap, float(gap.abs().max())) if gap.numel() else self.max_gap
        # The tokens were drawn from the engine: the mean of log(p_engine / p_trainer) estimates
        # KL(engine || trainer).
        self.kl += float(gap.sum())

    def merge(self, other: Mismatch) -> None:
        self.tokens += other.tokens
        self.abs_gap += other.abs_gap
        self.max_gap = max(self.max_gap, other.max_gap)
        self.kl += other.kl

    def metrics(self) -> dict[str, float]:
        if not self.tokens:
            return {}
        return {
            "rollout_logprob_gap": self.abs_gap / self.tokens,
            "rollout_logprob_gap_max": self.max_gap,
            "rollout_kl": self.kl / self.tokens,
        }


@dataclass
class UpdateStats:
    """What an update measured: counts, per-token statistics, gradient norms, the learning rate it ran at."""

    counts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0.0))
    totals: Totals = field(default_factory=Totals)
    mismatch: Mismatch = field(default_factory=Mismatch)
    grad_norms: list[float] = field(default_factory=list)
    tokens_trained: int = 0
    lr: float = 0.0

    def merge(self, other: UpdateStats) -> None:
        """Add `other` (another learner's update of the same step) into these."""
        for name, value in other.counts.items():
            self.counts[name] += value
        self.totals.merge(other.totals)
        self.mismatch.merge(other.mismatch)
        self.grad_norms += other.grad_norms
        self.tokens_trained += other.tokens_trained
        self.lr = max(self.lr, other.lr)

    def metrics(self) -> dict[str, float]:
        return {
            **self.counts,
            "lr": self.lr,
            "grad_norm": max(self.grad_norms) if self.grad_norms else 0.0,
            "tokens_trained": self.tokens_trained,
            **self.totals.means(),
            **self.mismatch.metrics(),
        }
