"""The seeds' environment loop with an AgentScope ReActAgent.

The environment's first messages (from `/create`) are the agent's system
prompt and first user message. Each turn the agent replies, the reply goes
to the environment as the action (`model_tuner.gym_step`), and the
observation comes back as the next user message, until the environment
says the episode is over, the context is full, or `multi_turn.max_steps`
turns have passed. The reward comes from the `env_service` judge (the
environment's `/evaluate` score); the per-step rewards are recorded in the
trajectory (`metadata["env_steps"]`).
"""

from __future__ import annotations

from agentscope.agent import ReActAgent
from agentscope.formatter import DashScopeChatFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg

from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask

DEFAULT_MAX_STEPS = 10


class EnvAgentWorkflow(Workflow):
    name: str = "env_agent_workflow"

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        first = workflow_task.gym_env.initial_messages
        system = "\n".join(m["content"] for m in first if m["role"] == "system")
        opening = "\n".join(m["content"] for m in first if m["role"] != "system")
        agent = ReActAgent(
            name="env_agent",
            sys_prompt=system,
            model=model_tuner,
            formatter=DashScopeChatFormatter(),
            memory=InMemoryMemory(),
            toolkit=None,
            max_iters=1,
        )
        agent.set_console_output_enabled(False)
        config = workflow_task.config
        max_steps = config.rollout.multi_turn.max_steps if config is not None else DEFAULT_MAX_STEPS

        interaction = Msg(name="env", content=opening, role="user")
        turns, step_reward, obs = 0, 0.0, ""
        for _ in range(max_steps):
            reply = await agent(interaction)
            obs, reward, terminated, _ = model_tuner.gym_step(
                action={"content": reply.get_text_content() or "", "role": "assistant"}
            )
            turns, step_reward = turns + 1, step_reward + reward
            interaction = Msg(name="env", content=obs, role="user")
            if terminated or model_tuner.context_overflow:
                break
        return WorkflowOutput(response=obs, metrics={"env_turns": turns, "env_step_reward": step_reward})
