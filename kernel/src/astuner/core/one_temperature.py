"""Samples for a trainer that recomputes every log-prob at one temperature.

verl's and Trinity-RFT's actors recompute each token's log-prob as
`log_softmax(logits / T)` with the one `T` of their config, whatever a call
was sampled at. A call a workflow or a gateway request sampled at another
temperature (`SamplingParams.override`) would be trained there against a
distribution it was not drawn from, so the backbones of those engines keep
such a call in the record but take it out of training: loss mask 0 over its
response span. Backbone torch needs none of this: its trainer takes each
call's recorded temperature.

Temperatures are compared as the ones the log-probs are at
(`CallSampling.logprob_temperature`: a greedy call's are at 1). Top-p and
top-k are not compared: those actors apply neither when they recompute, for
any call, so a call's own values change nothing in what they compute.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from astuner.core.trajectory import Sample


def untrain_other_temperatures(sample: Sample, temperature: float) -> tuple[Sample, list[float]]:
    """`sample` with loss mask 0 over each response span sampled at another temperature than the
    trainer's `temperature`, and the temperatures those spans' calls asked for (empty: `sample`
    itself, unchanged). Spans recorded without their sampling (older records) keep their mask."""
    mask = list(sample.loss_mask)
    asked: list[float] = []
    for (start, end, _), sampling in zip(sample.response_spans, sample.response_sampling, strict=False):
        if sampling is None or math.isclose(sampling.logprob_temperature, temperature, rel_tol=1e-6):
            continue
        mask[start:end] = [0] * (end - start)
        asked.append(sampling.temperature)
    if not asked:
        return sample, []
    return sample.model_copy(update={"loss_mask": mask}), asked


def other_temperature_warning(
    trainer: str, setting: str, temperature: float, asked: Sequence[float], counted_in: str
) -> str:
    """The warning a backbone logs (once) when `untrain_other_temperatures` left calls out: `trainer`
    names the engine, `setting` its temperature key, `counted_in` where each rollout's count goes."""
    calls = "1 model call" if len(asked) == 1 else f"{len(asked)} model calls"
    values = ", ".join(f"{t:g}" for t in sorted(set(asked)))
    return (
        f"{calls} of this rollout asked for temperature {values}, but {trainer}'s trainer recomputes "
        f"log-probs at {setting} = {temperature:g}: such calls stay in the record and are left out of "
        f"training (loss mask 0). Each rollout's count is in {counted_in}; this warning is logged once "
        "per worker. To train calls at their own temperature, use backbone torch."
    )
