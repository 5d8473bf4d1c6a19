"""The order desk's judge: one reward per role, for its own part of the order.

A role gets 1 when what it handed on is right for what it was handed, else
0: the clerk's ticket has the order's boxes and price, the pricer's number is
the product of the ticket's two, the cashier's the sum of the pricer's figure
and the shipping. Credit goes where the work was done: a cashier that adds
correctly after a wrong price is rewarded. And the untrained clerk works
first, on the customer's message alone, so nothing the others learn changes
its reward: the control. The order as a whole (`is_success`, metric
`order_right`) is right only when the cashier's total is the order's.

Metrics, per role as `agent/<role>/<metric>` (charted per agent): `correct`
(its part right) and, for the tool roles, `tool_call_rate` (its episodes
that ran a tool call); of the order: `order_right`, `roles_reached` (how many
roles got an input to work on).
"""

from __future__ import annotations

from typing import Any

from astuner import JudgeOutput, Task, WorkflowOutput


def part_right(step: dict[str, Any], items: dict[str, int]) -> bool:
    """Whether a role did its part: the right hand-off for what it was given."""
    given, handed = step["given"], step["handed"]
    if handed is None:
        return False
    if step["role"] == "clerk":
        return handed == [items["boxes"], items["price"]]
    if step["role"] == "pricer":
        return handed == given[0] * given[1]
    return handed == given + items["shipping"]


class OrderDeskJudge:
    """Scores a finished order: each role's part (the rewards), the order and the per-role metrics."""

    async def judge(self, task: Task, output: WorkflowOutput) -> JudgeOutput:
        meta = output.metadata
        items = {key: meta[key] for key in ("boxes", "price", "shipping")}
        steps = meta["steps"]
        right = {step["role"]: part_right(step, items) for step in steps}
        metrics: dict[str, float] = {"roles_reached": float(len(steps))}
        for step in steps:
            metrics[f"agent/{step['role']}/correct"] = float(right[step["role"]])
            if step["role"] != "clerk":
                metrics[f"agent/{step['role']}/tool_call_rate"] = float(step["tool_calls"] > 0)
        order_right = meta["total"] == items["boxes"] * items["price"] + items["shipping"]
        metrics["order_right"] = float(order_right)
        return JudgeOutput(
            reward={role: float(ok) for role, ok in right.items()},
            is_success=order_right,
            metrics=metrics,
        )
