"""`AstunerWorkflow` built and run exactly as Trinity's explorer does, through a full tool-using episode.

Trinity's task formatter turns a task row into its `Task` with the workflow
class the translated config names; the runner calls `task.to_workflow(model)`
and awaits `run_async()`. The model wrapper is scripted: it answers a
`{"prompt_token_ids": ...}` prompt as Trinity's vLLM actor does (one
Experience: prompt + response tokens, prompt_length, response log-probs),
with a tool call first and the answer once it sees the tool's result.
Trinity env only (its model wrapper module imports vLLM, hence the script).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trinity")

import torch
import yaml
from astuner_backbone_trinity.translate import WORKFLOW_PATH
from astuner_backbone_trinity.workflow import AstunerWorkflow, _experience
from structlog.testing import capture_logs
from trinity.algorithm.advantage_fn.multi_step_grpo_advantage import StepWiseGRPOAdvantageFn
from trinity.buffer.schema import FORMATTER
from trinity.common.config import GenerationConfig, TasksetConfig
from trinity.common.experience import Experience, group_by
from trinity.utils.metrics import aggregate_metrics, aggregate_run_level_metrics
from trinity_workflows import COOLER

from astuner.core.merge import merge_trajectory
from astuner.core.task import Task
from astuner.core.tokenizer import load_tokenizer
from astuner.core.trajectory import LLMCall, Trajectory
from astuner.errors import AstunerError
from astuner.rollout.episode import EpisodeSource
from astuner.testing.counting import CountedJudge

HERE = Path(__file__).parent
TOOL_LOGPROB, ANSWER_LOGPROB = -0.25, -0.5
TOOL_CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6 * 7"}}\n</tool_call>'


class ScriptedModelWrapper:
    """Trinity's `ModelWrapper.generate_async`, scripted: decoded prompt -> reply text."""

    def __init__(self, tokenizer: Any, answer: str = "42", logprobs: bool = True) -> None:
        self.tokenizer = tokenizer
        self.answer = answer
        self.logprobs = logprobs
        self.requests: list[dict[str, Any]] = []

    async def generate_async(self, prompts: list[Any], **kwargs: Any) -> list[Experience]:
        (prompt,) = prompts
        self.requests.append({"prompt": prompt, **kwargs})
        ids = prompt["prompt_token_ids"]
        seen_tool = "<tool_response>" in self.tokenizer.decode(ids)
        text, logprob = (self.answer, ANSWER_LOGPROB) if seen_tool else (TOOL_CALL, TOOL_LOGPROB)
        reply = [*self.tokenizer.encode(text), self.tokenizer.end_of_turn_id]
        return [
            Experience(
                tokens=torch.tensor(ids + reply, dtype=torch.int32),
                logprobs=torch.full((len(reply),), logprob) if self.logprobs else None,
                prompt_length=len(ids),
                response_text=text,
            )
        ]


@pytest.fixture
def taskset(tmp_path: Path, tiny_model_dir: Path) -> TasksetConfig:
    config = tmp_path / "config.yaml"
    block = {
        "model": {"path": str(tiny_model_dir)},
        # Trinity's trainer recomputes log-probs at model.temperature (rollout.temperature), which
        # Trinity also gives the taskset's rollout_args unless they set their own
        "rollout": {"agentscope_workflow": "trinity_workflows->calculator_agent", "temperature": 0.7},
        "task_judge": {"judge_protocol": "exact"},
    }
    config.write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    EpisodeSource._shared.clear()
    return TasksetConfig(
        name="astuner_train",
        default_workflow_type=WORKFLOW_PATH,
        rollout_args=GenerationConfig(temperature=0.7, top_p=0.9, max_tokens=64),
        workflow_args={"astuner_config": str(config), "astuner_search_paths": [str(HERE)]},
    )


def _run(taskset: TasksetConfig, model: ScriptedModelWrapper, row: dict[str, Any]) -> list[Experience]:
    """What Trinity's reader and workflow runner do with one row, for one run."""
    trinity_task = FORMATTER.get("task")(taskset.to_storage_config()).format(row)
    trinity_task.task_id = 0
    workflow = trinity_task.to_workflow(model)
    assert isinstance(workflow, AstunerWorkflow) and workflow.asynchronous
    return asyncio.run(workflow.run_async())


def _row(answer: str = "42") -> dict[str, Any]:
    task = Task(task_id="t0", main_query="What is 6 * 7?", metadata={"answer": answer})
    return {"astuner_task": task.model_dump_json()}


def test_a_tool_episode_becomes_one_trinity_experience(taskset: TasksetConfig, tiny_model_dir: Path) -> None:
    tokenizer = load_tokenizer(str(tiny_model_dir))
    model = ScriptedModelWrapper(tokenizer)
    (exp,) = _run(taskset, model, _row())

    assert len(model.requests) == 2
    first, second = (r["prompt"]["prompt_token_ids"] for r in model.requests)
    assert all(r["logprobs"] == 0 and r["n"] == 1 for r in model.requests)
    assert [(r["temperature"], r["top_p"], r["max_tokens"]) for r in model.requests] == [(0.7, 0.9, 64)] * 2
    # token-in/token-out: the second prompt extends the first prompt and its reply exactly
    tokens = exp.tokens.tolist()
    assert exp.prompt_length == len(first)
    assert tokens[: len(second)] == second and tokens[: len(first)] == first
    mask = exp.action_mask.tolist()
    assert len(mask) == len(exp.logprobs) == len(tokens) - exp.prompt_length
    tool_reply = [*tokenizer.encode(TOOL_CALL), tokenizer.end_of_turn_id]
    answer = [*tokenizer.encode("42"), tokenizer.end_of_turn_id]
    n_tool_result = len(second) - len(first) - len(tool_reply)
    assert mask == [1] * len(tool_reply) + [0] * n_tool_result + [1] * len(answer)
    assert tokens[len(first) : len(first) + len(tool_reply)] == tool_reply
    assert tokens[-len(answer) :] == answer
    assert "<tool_response>" in tokenizer.decode(tokens[len(first) + len(tool_reply) : len(second)])
    expected = [TOOL_LOGPROB] * len(tool_reply) + [0.0] * n_tool_result + [ANSWER_LOGPROB] * len(answer)
    assert exp.logprobs.tolist() == pytest.approx(expected)
    assert exp.reward == 1.0
    assert exp.experience_type == "multi_turn"


def test_a_call_sampled_at_another_temperature_than_trinity_trains_at_stays_untrained(
    taskset: TasksetConfig, tiny_model_dir: Path
) -> None:
    """Trinity's trainer recomputes log-probs at model.temperature (0.7 here): the tool call, sampled
    there, trains; the answer, sampled at COOLER, stays in the experience with mask 0; one warning."""
    config = Path(taskset.workflow_args["astuner_config"])
    conf = yaml.safe_load(config.read_text(encoding="utf-8"))
    conf["astuner"]["rollout"]["agentscope_workflow"] = "trinity_workflows->cooler_answer"
    config.write_text(yaml.safe_dump(conf), encoding="utf-8")
    tokenizer = load_tokenizer(str(tiny_model_dir))
    model = ScriptedModelWrapper(tokenizer)
    tool_reply = len(tokenizer.encode(TOOL_CALL)) + 1
    answer = [*tokenizer.encode("42"), tokenizer.end_of_turn_id]
    with capture_logs() as logs:
        runs = [_run(taskset, model, _row()) for _ in range(2)]
    assert [r["temperature"] for r in model.requests] == [0.7, COOLER] * 2
    for (exp,) in runs:
        assert exp.tokens.tolist()[-len(answer) :] == answer  # kept in the experience ...
        assert exp.logprobs.tolist()[-len(answer) :] == pytest.approx([ANSWER_LOGPROB] * len(answer))
        # ... and not trained: only the tool call carries loss
        mask = exp.action_mask.tolist()
        assert mask == [1] * tool_reply + [0] * (len(mask) - tool_reply)
        assert exp.reward == 1.0
    # counted per experience; Trinity sums the count over a run, a task's runs and a step's tasks
    runs_of_task = [aggregate_run_level_metrics([exp.metrics for exp in run]) for run in runs]
    step = aggregate_metrics([aggregate_run_level_metrics(runs_of_task)], prefix="rollout")
    assert step["rollout/astuner/untrained_calls/sum"] == 2
    (warning,) = [log for log in logs if "recomputes log-probs" in log["event"]]
    assert warning["log_level"] == "warning"
    assert "model.temperature = 0.7" in warning["event"] and f"temperature {COOLER}" in warning["event"]
    assert "backbone torch" in warning["event"]

    # an evaluation task is not trained: nothing is masked or counted
    (evaluated,) = _run(replace(taskset, is_eval=True), model, _row())
    assert sum(evaluated.action_mask.tolist()) == tool_reply + len(answer)
    assert not any(key.startswith("astuner/untrained_calls") for key in evaluated.metrics)


def test_the_reward_is_the_judge_and_madness_verdict(taskset: TasksetConfig, tiny_model_dir: Path) -> None:
    tokenizer = load_tokenizer(str(tiny_model_dir))
    (wrong,) = _run(taskset, ScriptedModelWrapper(tokenizer, answer="41"), _row())
    assert wrong.reward == 0.0
    # a stray special token in the reply fires the `nonsense` check: the madness reward replaces the judge's
    (mad,) = _run(taskset, ScriptedModelWrapper(tokenizer, answer="42 <|im_start|> 42"), _row())
    assert mad.reward == -1.0


def test_a_failed_run_is_reported_to_trinity(taskset: TasksetConfig, tiny_model_dir: Path) -> None:
    tokenizer = load_tokenizer(str(tiny_model_dir))
    with pytest.raises(AstunerError, match="astuner_task"):
        _run(taskset, ScriptedModelWrapper(tokenizer), {"question": "no astuner task here"})
    # a model without log-probs makes the workflow raise inside the run: Trinity gets the error, no experience
    with pytest.raises(AstunerError, match=r"(?s)workflow failed.*log-prob"):
        _run(taskset, ScriptedModelWrapper(tokenizer, logprobs=False), _row())


def test_a_runner_process_builds_the_rollout_stack_once(taskset: TasksetConfig, tiny_model_dir: Path) -> None:
    """Trinity builds the workflow per run, each run on its own event loop here; the judge is built once."""
    config = Path(taskset.workflow_args["astuner_config"])
    conf = yaml.safe_load(config.read_text(encoding="utf-8"))
    conf["astuner"]["task_judge"] = {"judge_protocol": "astuner.testing.counting->CountedJudge"}
    config.write_text(yaml.safe_dump(conf), encoding="utf-8")
    tokenizer = load_tokenizer(str(tiny_model_dir))
    built = CountedJudge.built
    rewards = [exp.reward for _ in range(3) for exp in _run(taskset, ScriptedModelWrapper(tokenizer), _row())]
    assert rewards == [1.0] * 3
    assert CountedJudge.built == built + 1


def _scored_run(wolf: float, seer: float) -> Trajectory:
    """The wolf speaks twice and the seer once, each on a fresh prompt (three samples); scored per agent."""
    speakers = ("wolf", "seer", "wolf")
    calls = [
        LLMCall(
            index=i, agent_name=name, prompt_ids=[1, 2 + i], response_ids=[7, 8], response_logprobs=[-0.5] * 2
        )
        for i, name in enumerate(speakers)
    ]
    rewards = {"wolf": wolf, "seer": seer}
    return Trajectory(
        trajectory_id=f"{wolf}-{seer}", reward=(wolf + seer) / 2, agent_rewards=rewards, calls=calls
    )


def _run_experiences(trajectory: Trajectory, run: int) -> list[Experience]:
    """The run's experiences as the workflow makes them, with the ids Trinity's runner then sets."""
    samples, _ = merge_trajectory(trajectory)
    experiences = [_experience(sample, step, trajectory, 3) for step, sample in enumerate(samples)]
    for experience in experiences:
        experience.eid.batch, experience.eid.run = 0, run
        experience.eid.task = experience.eid.task or 3
    return experiences


def test_per_agent_rewards_give_each_agent_its_reward_and_its_own_multi_step_grpo_group() -> None:
    runs = [_scored_run(1.0, 0.0), _scored_run(0.0, 0.0), _scored_run(0.5, 1.0)]
    experiences = [e for run, trajectory in enumerate(runs) for e in _run_experiences(trajectory, run)]
    first = [(e.info["agent_name"], e.eid.task, e.reward) for e in experiences[:3]]
    assert first == [("wolf", "3/wolf", 1.0), ("seer", "3/seer", 0.0), ("wolf", "3/wolf", 1.0)]
    trained, _ = StepWiseGRPOAdvantageFn().process(experiences)
    assert sorted(group_by(trained, "task")) == ["0/3/seer", "0/3/wolf"]
    advantage = {(e.eid.run, e.eid.step): float(e.advantages[0]) for e in trained}
    # the wolf's baseline is its own rewards (1, 0, 0.5): mean 0.5, std 0.5; both its steps share it
    wolf = [advantage[(run, step)] for run in range(3) for step in (0, 2)]
    assert wolf == pytest.approx([1.0, 1.0, -1.0, -1.0, 0.0, 0.0], abs=1e-4)
    # the seer's (0, 0, 1): its runs rank among themselves, whatever the wolf scored
    seer = [advantage[(run, 1)] for run in range(3)]
    assert seer[0] == seer[1] < 0 < seer[2]


def test_without_per_agent_rewards_every_experience_has_the_run_s_reward_and_task() -> None:
    trajectory = _scored_run(1.0, 0.0).model_copy(update={"agent_rewards": {}})
    experiences = _run_experiences(trajectory, 0)
    assert [(e.eid.task, e.reward) for e in experiences] == [(3, 0.5)] * 3


@pytest.mark.parametrize(("targets", "agents"), [([], ["seer"]), (["wolf", "seer"], ["wolf", "seer"])])
def test_a_game_carries_rewards_and_trainable_targets_to_trinity(
    taskset: TasksetConfig, tiny_model_dir: Path, targets: list[str], agents: list[str]
) -> None:
    config = Path(taskset.workflow_args["astuner_config"])
    conf = yaml.safe_load(config.read_text(encoding="utf-8"))
    conf["astuner"]["rollout"] = {
        "agentscope_workflow": "trinity_workflows->SeerGame",
        "trainable_targets": targets,
    }
    conf["astuner"]["task_judge"] = {"judge_protocol": "trinity_workflows->ScoresPerAgent"}
    config.write_text(yaml.safe_dump(conf), encoding="utf-8")
    model = ScriptedModelWrapper(load_tokenizer(str(tiny_model_dir)))
    task = Task(task_id="g0", main_query="Play.", metadata={"rewards": {"wolf": 1.0, "seer": 0.25}})
    experiences = _run(taskset, model, {"astuner_task": task.model_dump_json()})
    assert len(model.requests) == 2  # both agents generate
    # the workflow's trainable_targets (the seer), or the config's, which win over them
    assert [e.info["agent_name"] for e in experiences] == agents
    assert [(e.eid.task, e.reward) for e in experiences] == [
        (f"0/{agent}", {"wolf": 1.0, "seer": 0.25}[agent]) for agent in agents
    ]
