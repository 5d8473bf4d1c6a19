"""Workflows for training runs with the tiny random model (imported by string from test configs).

The tiny model writes noise, so rewards come from the sampled tokens
themselves: deterministic given the tokens, and different between runs of
a group, so advantages are not all zero and the weights really move.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
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


async def _hold_if_asked(workflow_task: WorkflowTask) -> None:
    """Keep this rollout in flight when its group matches BT_HOLD_GROUP, once its rollout and task ids are
    appended to BT_HOLD_FILE (a JSON line each): unlike `_pause_if_asked` it leaves the event loop free, so
    the run goes on around a batch that stays under way until the test kills it."""
    group = os.environ.get("BT_HOLD_GROUP")
    if group and workflow_task.group_id.startswith(group):
        held = {"rollout_id": workflow_task.rollout_id, "task_id": workflow_task.task.task_id}
        with Path(os.environ["BT_HOLD_FILE"]).open("a", encoding="utf-8") as out:
            out.write(json.dumps(held) + "\n")
        await asyncio.sleep(600)


def _pause_saves_if_asked() -> None:
    """When BT_PAUSE_SAVE names a step, make that step's checkpoint stop half-written (its model files
    written, no trainer state yet), the folder they went to written to BT_PAUSE_FILE:
    a test can then SIGKILL a run mid-save. It wraps `Policy.save` as this module loads, which a run
    does before its first step (the workflow loads before the model)."""
    step = os.environ.get("BT_PAUSE_SAVE")
    if not step:
        return
    from astuner_backbone_torch.policy import Policy

    save = Policy.save

    def pausing(self: Policy, folder: Path) -> None:
        save(self, folder)
        if re.match(rf"\.?step_{step}(-|$)", Path(folder).name):  # its temporary folder, or its own
            Path(os.environ["BT_PAUSE_FILE"]).write_text(str(Path(folder).resolve()))
            time.sleep(600)  # in the saving thread (asynchronous rollouts): the event loop goes on

    Policy.save = pausing  # type: ignore[method-assign]


_pause_saves_if_asked()


class TwoTurn(Workflow):
    """Ask, then ask again with the first answer in context: two calls that merge into one sample."""

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        _pause_if_asked(workflow_task)
        messages = [{"role": "user", "content": workflow_task.task.main_query}]
        first = await model_tuner.chat(messages)
        await _hold_if_asked(workflow_task)
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
