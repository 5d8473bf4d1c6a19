"""The agent: a multi-turn loop against an environment service.

The class form of a workflow: `execute` gets the `WorkflowTask` (with
`gym_env`, this rollout's own environment instance) and the trainable model
handle. The environment's first messages open the conversation; each turn
the model's reply is the action, and the observation comes back as the
next user message, until the environment says the episode is over, the
context is full, or `rollout.multi_turn.max_steps` turns have passed.

The reward comes from the `env_service` judge (the environment's own score);
every step's reward is kept in the trajectory as well (`metadata["env_steps"]`).
"""

from __future__ import annotations

from typing import Any

from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask


class GameAgent(Workflow):
    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        messages: list[dict[str, Any]] = list(workflow_task.gym_env.initial_messages)
        config = workflow_task.config
        max_turns = config.rollout.multi_turn.max_steps if config is not None else 8
        observation, turns = "", 0
        while turns < max_turns:
            call = await model_tuner.chat(messages)
            action = {"role": "assistant", "content": call.content}
            observation, _, done, _ = await model_tuner.agym_step(action)
            turns += 1
            messages += [action, {"role": "user", "content": observation}]
            if done or model_tuner.context_overflow:
                break
        return WorkflowOutput(response=observation, metrics={"turns": float(turns)})
