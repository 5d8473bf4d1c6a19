"""An advantage estimator `group_max`: each run's score against the best run of its task.

Chosen with `trainer_common.algorithm.adv_estimator: group_max`. The
factory returns a pure numpy function of the batch's scores and their task
groups; the trainer computes `(score - baseline) / scale` per run and gives
it to every token the run generated. `counterparts` says what verl's
config sets for the same algorithm; without one, verl and Trinity refuse it,
naming the key.
"""

from typing import Any

from astuner.api import Register, hookimpl


def group_max(scores: Any, group: Any, eps: float) -> tuple[Any, Any]:
    """scores: `(B,)` float64, group: `(B,)` int64 -> baseline and scale, both `(B,)`."""
    import numpy as np

    best = np.full(int(group.max()) + 1, -np.inf)
    np.maximum.at(best, group, scores)
    return best[group], np.ones_like(scores)


@hookimpl
def register_advantage_estimators(register: Register) -> None:
    register("group_max", lambda: group_max, summary="Score minus the best score of the task's runs.")
