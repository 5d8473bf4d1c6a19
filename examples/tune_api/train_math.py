"""Train a math agent from Python with `astuner.tune()`, the way the AgentScope Tuner tutorial does.

Three pieces, then one call:

1. a workflow function: an AgentScope ReActAgent answers one task with the
   model being tuned;
2. a judge function: turns the agent's answer into a reward;
3. the task set, the model and the algorithm, as config objects.

Run it from the repository root (CPU is enough: two steps of SmolLM2-135M):

    python examples/tune_api/train_math.py
"""

from __future__ import annotations

from pathlib import Path

from agentscope.agent import ReActAgent
from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import Msg
from astuner_judge_math.compare import equivalent
from astuner_judge_math.extract import extract_prediction, extract_reference

from astuner import (
    AlgorithmConfig,
    DatasetConfig,
    JudgeOutput,
    ModelTuner,
    TunerModelConfig,
    WorkflowOutput,
    tune,
)

# GSM8K as train.jsonl / test.jsonl, each row {"question": ..., "answer": "... #### 72"}.
# This is the copy beside the repository (../shared/data/gsm8k from its root);
# `astuner data download openai/gsm8k --path DIR` writes your own.
GSM8K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gsm8k"

SYSTEM_PROMPT = (
    "You are an agent that solves math problems. Think step by step, "
    "then give the final answer as a number within \\boxed{}."
)


async def math_workflow(
    task: dict, model: ModelTuner, auxiliary_models: dict | None = None
) -> WorkflowOutput:
    """Solve one task. `task` is the dataset row; `model` is the model being tuned."""
    agent = ReActAgent(
        name="math_agent",
        sys_prompt=SYSTEM_PROMPT,
        model=model,  # every call the agent makes through it is recorded for training
        formatter=OpenAIChatFormatter(),
        max_iters=2,
    )
    agent.set_console_output_enabled(False)
    reply = await agent.reply(Msg("user", task["question"], role="user"))
    return WorkflowOutput(response=reply.get_text_content())


async def math_judge(task: dict, response: str | None, auxiliary_models: dict | None = None) -> JudgeOutput:
    """Reward 1 when the agent's final answer equals the number after GSM8K's '####'."""
    predicted = extract_prediction(response)  # the last \boxed{...}, else the last number
    reference = extract_reference(task["answer"])
    correct = predicted is not None and reference is not None and equivalent(predicted, reference)
    return JudgeOutput(reward=float(correct), is_success=correct)


if __name__ == "__main__":
    result = tune(
        workflow_func=math_workflow,
        judge_func=math_judge,
        # the train split, two training steps
        train_dataset=DatasetConfig(path=str(GSM8K), split="train", total_steps=2),
        # a real 135M instruct model that trains on CPU; short replies keep each step short
        model=TunerModelConfig(
            model_path="builtin:smollm2-135m-instruct",
            max_model_len=2048,
            temperature=1.0,
            max_tokens=64,
        ),
        # GRPO: each step takes 4 problems and runs each 4 times
        algorithm=AlgorithmConfig(group_size=4, batch_size=4, learning_rate=1e-6),
    )
    print(f"trained {result.metrics['step']} steps, last reward {result.metrics['train/reward_mean']:.3f}")
    print(f"checkpoint: {result.checkpoint}")
