"""Declares what a judge's numbers mean: `one_hop/correct` and `two_hop/correct`, charted under "judge".

A judge that returns `JudgeOutput(metrics={"one_hop/correct": 1.0})` gets
`train/judge/one_hop/correct` (and `val/...`, `eval/...`) in metrics.jsonl;
declaring it gives that key a label, a description and a direction in the
console line, TensorBoard and the log viewer. A declaration may also carry a
health rule (`astuner.training.HealthRule`), as the kernel's own do.
"""

from typing import Any

from astuner.api import hookimpl


@hookimpl
def register_metrics(register: Any) -> None:
    for hops in ("one_hop", "two_hop"):
        register(
            f"{{split}}/judge/{hops}/correct",
            label=f"{hops.replace('_', ' ')} answers correct",
            description=f"Share of {hops.replace('_', '-')} questions the judge found answered correctly.",
            good="up",
            console=True,
            group="judge",
        )
