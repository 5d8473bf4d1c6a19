"""The model handle's judge-input concern: values a workflow hands to the judge (the first tutorials' way).

A workflow of the first tutorials calls
`model_tuner.update_judge_input_dictionary(final_answer=...)` instead of
returning a `WorkflowOutput`; the runner merges what was collected into the
output's `metadata` before judging (`WorkflowOutput.with_judge_input`).
"""

from __future__ import annotations

from typing import Any

from astuner import compat


class JudgeInput:
    """What one rollout's workflow has handed to the judge so far; every view of the handle shares it."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def update(self, **values: Any) -> None:
        """Add or replace values; says once that this is the first tutorials' form."""
        compat.emit_notices([compat.JUDGE_INPUT_NOTICE])
        self.values.update(values)

    def snapshot(self) -> dict[str, Any]:
        """A copy of the values, safe to change."""
        return dict(self.values)
