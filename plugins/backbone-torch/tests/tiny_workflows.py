"""Workflows for training runs with the tiny random model (imported by string from test configs).

The tiny model writes noise, so rewards come from the sampled tokens
themselves: deterministic given the tokens, and different between runs of
a group, so advantages are not all zero and the weights really move.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic import Field

from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask


def token_reward(ids: list[int]) -> float:
    """The share of even token ids: a reward the policy can learn to raise."""
    return sum(1 for i in ids if i % 2 == 0) / max(len(ids), 1)


def _pause_if_asked(workflow_task: WorkflowTask) -> None:
    """Stop here (so a test can SIGKILL the run mid-step) when the group matches BT_PAUSE_GROUP."""
    group = os.environ.get("BT_PAUSE_GROUP")
    if group and workflow_task.group_id.startswith(group):
        Path(os.environ["BT_PAUSE_FILE"]).write_text(workflow_task.group_id)
        time.sleep(600)


class TwoTurn(Workflow):
    """Ask, then ask again with the first answer in context: two calls that merge into one sample."""

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        _pause_if_asked(workflow_task)
        messages = [{"role": "user", "content": workflow_task.task.main_query}]
        first = await model_tuner.chat(messages)
        messages += [{"role": "assistant", "content": first.content}, {"role": "user", "content": "Sure?"}]
        second = await model_tuner.chat(messages)
        ids = first.response_ids + second.response_ids
        return WorkflowOutput(
            reward=token_reward(ids), is_success=token_reward(ids) > 0.5, response=second.content
        )


class NanForTheFirstRollout:
    """A judge (by import string) that returns NaN for the first rollout of every step's first group."""

    def compute_reward(self, workflow_task: WorkflowTask, output: WorkflowOutput) -> tuple[float, bool]:
        if workflow_task.group_id.endswith("-0") and workflow_task.repeat_index == 0:
            return float("nan"), False
        return float(output.reward), bool(output.is_success)


class TwoAgents(Workflow):
    """A wolf and a seer answer the task in turn, then a villager (who has no adapter of its own)."""

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        ids: list[int] = []
        for agent in ("wolf", "seer", "villager"):
            messages = [{"role": "user", "content": f"{agent}: {workflow_task.task.main_query}"}]
            ids += (await model_tuner.for_agent(agent).chat(messages)).response_ids
        return WorkflowOutput(reward=token_reward(ids), is_success=token_reward(ids) > 0.5)


class WolfTrains(TwoAgents):
    """`TwoAgents` whose workflow, not the config, says that only the wolf trains."""

    trainable_targets: list[str] = Field(default_factory=lambda: ["wolf"])
