"""The order desk's judge: one reward per role, for its own part of the order.

A role gets 1 when the number it handed on is right for what it was handed
(the pricer's product of the order, the cashier's sum of the pricer's figure
and the shipping, the clerk's receipt in dollars of the cashier's total), else
0. Credit goes where the work was done: a cashier that adds correctly after a
wrong price is rewarded, and a role's reward does not move with the others'
skill, so an untrained role's reward stays where its own play puts it. The
order as a whole (`is_success`, metric `order_right`) is right only when all
three are.

Metrics, per role as `agent/<role>/<metric>` (charted per agent):
`correct` (its part right), `tool_call_rate` (its episodes that ran a tool
call; tool roles only), and of the order: `order_right`, `roles_reached`
(how many roles got an input to work on).
"""

from __future__ import annotations

from typing import Any

from desk import dollars

from astuner import JudgeOutput, Task, WorkflowOutput


def part_right(step: dict[str, Any], items: dict[str, int]) -> bool:
    """Whether a role did its part: the right number for what it was given."""
    given, number, answer = step["given"], step["number"], step["answer"]
    if step["role"] == "pricer":
        return number == items["boxes"] * items["price"]
    if step["role"] == "cashier":
        return number == given + items["shipping"]
    return dollars(given) in answer


class OrderDeskJudge:
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
        order_right = len(steps) == 3 and all(right.values()) and meta["expected"] in meta["receipt"]
        metrics["order_right"] = float(order_right)
        return JudgeOutput(
            reward={role: float(ok) for role, ok in right.items()},
            is_success=order_right,
            metrics=metrics,
        )
