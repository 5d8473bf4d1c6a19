"""The `astuner` agent loop, instantiated exactly as verl's AgentLoopWorker does, through a full episode.

The rollout server is scripted: it decodes the prompt ids it receives and
answers with fixed text, as verl's `server_manager.generate` would, so the
test checks what verl gets back: one merged sequence, its masks, log-probs
and the judge's reward. verl env only.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl")

import hydra
from astuner_backbone_verl.backbone import AGENT_LOOP_CLASS
from omegaconf import OmegaConf
from structlog.testing import capture_logs
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput
from verl_workflows import COOLER

from astuner.core.merge import merge_trajectory
from astuner.core.task import Task
from astuner.core.trajectory import LLMCall, Trajectory
from astuner.rollout.episode import EpisodeSource
from astuner.testing.counting import CountedJudge
from astuner.testing.tokenizers import qwen25_tokenizer

HERE = Path(__file__).parent
LOGPROB = -0.5


class ScriptedServer:
    """verl's server manager, scripted: replies are decoded-prompt -> text."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.requests: list[dict[str, Any]] = []

    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict) -> TokenOutput:
        self.requests.append({"request_id": request_id, "prompt_ids": prompt_ids, **sampling_params})
        text = "42" if "calculator" in self.tokenizer.decode(prompt_ids) else "Let me think."
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        ids.append(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        return TokenOutput(token_ids=ids, log_probs=[LOGPROB] * len(ids), stop_reason="completed")


def _write_config(
    folder: Path, tiny_model_dir: Path, judge: str = "exact", workflow: str = "two_turns", **rollout: Any
) -> Path:
    import yaml

    path = folder / "config.yaml"
    block = {
        "model": {"path": str(tiny_model_dir)},
        "rollout": {
            "agentscope_workflow": f"verl_workflows->{workflow}",
            "compute_madness_checklist": [],
            **rollout,
        },
        "task_judge": {"judge_protocol": judge},
    }
    path.write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    return path


@pytest.fixture
def astuner_config(tmp_path: Path, tiny_model_dir: Path) -> Path:
    return _write_config(tmp_path, tiny_model_dir)


def _trainer_config(prompt_length: int = 256, response_length: int = 128) -> Any:
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": prompt_length,
                    "response_length": response_length,
                    "temperature": 1.0,
                },
            },
            "data": {"apply_chat_template_kwargs": {}},
        }
    )


def _instantiate(astuner_config: Path, server: ScriptedServer, tokenizer: Any, config: Any) -> Any:
    entry = {
        "name": "astuner",
        "_target_": AGENT_LOOP_CLASS,
        "astuner_config": str(astuner_config),
        "astuner_search_paths": [str(HERE)],
    }
    return hydra.utils.instantiate(
        config=entry,
        trainer_config=DictConfigWrap(config=config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type="qwen2",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([]),
    )


def _row(task: Task, uid: str = "uid-0") -> dict[str, Any]:
    return {
        "raw_prompt": [{"role": "user", "content": task.main_query}],
        "extra_info": {"astuner_task": task.model_dump_json(), "index": 0},
        "index": 0,
        "uid": uid,
    }


def test_a_full_episode_becomes_one_verl_sequence(astuner_config: Path) -> None:
    EpisodeSource._shared.clear()
    tokenizer = qwen25_tokenizer()
    server = ScriptedServer(tokenizer)
    loop = _instantiate(astuner_config, server, tokenizer, _trainer_config())
    task = Task(task_id="t0", main_query="What is 6 * 7?", metadata={"answer": "42"})
    out = asyncio.run(loop.run({"temperature": 1.0, "top_p": 1.0, "repetition_penalty": 1.0}, **_row(task)))

    assert len(server.requests) == 2
    assert len({r["request_id"] for r in server.requests}) == 1  # one sticky session per episode
    assert all(r["logprobs"] is True and r["repetition_penalty"] == 1.0 for r in server.requests)
    first, second = server.requests
    # token-in/token-out: the second prompt extends the first prompt + reply exactly
    assert out.prompt_ids == first["prompt_ids"]
    assert second["prompt_ids"][: len(first["prompt_ids"])] == first["prompt_ids"]
    assert (
        out.prompt_ids + out.response_ids[: len(second["prompt_ids"]) - len(first["prompt_ids"])]
        == second["prompt_ids"]
    )
    assert out.reward_score == 1.0
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)
    generated = [i for i, m in enumerate(out.response_mask) if m == 1]
    assert [out.response_logprobs[i] for i in generated] == [LOGPROB] * len(generated)
    assert 0 in out.response_mask  # the user turn between the two replies is not trained
    assert tokenizer.decode([out.response_ids[i] for i in generated]).endswith("42<|im_end|>")
    assert out.extra_fields["astuner_samples_dropped"] == 0


def test_a_call_sampled_at_another_temperature_than_verl_trains_at_stays_untrained(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """verl's actor recomputes log-probs at rollout.temperature (1.0 here): the first reply, sampled there,
    trains; the second, sampled at COOLER, stays in the sequence with mask 0; the worker warns once."""
    EpisodeSource._shared.clear()
    config = _write_config(tmp_path, tiny_model_dir, workflow="cooler_second_turn")
    tokenizer = qwen25_tokenizer()
    server = ScriptedServer(tokenizer)
    loop = _instantiate(config, server, tokenizer, _trainer_config())
    task = Task(task_id="t4", main_query="What is 6 * 7?", metadata={"answer": "42"})
    first_reply = len(tokenizer.encode("Let me think.", add_special_tokens=False)) + 1
    answer = tokenizer.encode("42<|im_end|>", add_special_tokens=False)
    with capture_logs() as logs:
        outs = [asyncio.run(loop.run({"temperature": 1.0}, **_row(task))) for _ in range(2)]
    assert [r["temperature"] for r in server.requests] == [1.0, COOLER] * 2
    for out in outs:
        assert out.response_ids[-len(answer) :] == answer  # kept in the sequence ...
        assert out.response_logprobs[-len(answer) :] == [LOGPROB] * len(answer)
        # ... and not trained: only the first reply carries loss
        assert out.response_mask == [1] * first_reply + [0] * (len(out.response_mask) - first_reply)
        assert out.extra_fields["astuner_untrained_calls"] == 1
        assert out.reward_score == 1.0
    (warning,) = [log for log in logs if "recomputes log-probs" in log["event"]]
    assert warning["log_level"] == "warning"
    assert "rollout.temperature = 1" in warning["event"] and f"temperature {COOLER}" in warning["event"]
    assert "backbone torch" in warning["event"]

    # a run verl starts at another temperature (validation at val_kwargs) is not trained: nothing is masked
    validation = asyncio.run(loop.run({"temperature": COOLER}, **_row(task)))
    assert sum(validation.response_mask) == first_reply + len(answer)
    assert "astuner_untrained_calls" not in validation.extra_fields


def test_a_prompt_over_verl_limit_comes_back_untrained(astuner_config: Path) -> None:
    EpisodeSource._shared.clear()
    tokenizer = qwen25_tokenizer()
    loop = _instantiate(
        astuner_config, ScriptedServer(tokenizer), tokenizer, _trainer_config(prompt_length=8)
    )
    task = Task(task_id="t1", main_query="What is 6 * 7?", metadata={"answer": "42"})
    out = asyncio.run(loop.run({"temperature": 1.0}, **_row(task)))
    assert out.response_mask == [0]
    assert "data.max_prompt_length" in out.extra_fields["astuner_error"]
    assert len(out.prompt_ids) <= 8


def test_a_worker_builds_the_rollout_stack_once_for_every_loop_it_instantiates(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """verl instantiates the agent loop per sample; the judge (and the rest of the stack) is built once."""
    EpisodeSource._shared.clear()
    config = _write_config(tmp_path, tiny_model_dir, judge="astuner.testing.counting->CountedJudge")
    tokenizer = qwen25_tokenizer()
    task = Task(task_id="t2", main_query="What is 6 * 7?", metadata={"answer": "42"})
    built = CountedJudge.built

    async def batch() -> list[Any]:
        loops = [
            _instantiate(config, ScriptedServer(tokenizer), tokenizer, _trainer_config()) for _ in range(3)
        ]
        return list(await asyncio.gather(*(loop.run({"temperature": 1.0}, **_row(task)) for loop in loops)))

    assert [out.reward_score for out in asyncio.run(batch())] == [1.0] * 3
    assert [out.reward_score for out in asyncio.run(batch())] == [1.0] * 3
    assert CountedJudge.built == built + 1


ROLES = ("wolf", "seer")


def _game(trajectory_id: str, rewards: dict[str, float] | None) -> Trajectory:
    """A finished run: each role made one call on a prompt of its own ([1, 2 + its number]), so each
    merges into a sample of its own; scored per agent unless `rewards` is None."""
    calls = [
        LLMCall(index=i, agent_name=role, prompt_ids=[1, 2 + i], response_ids=[9, 2])
        for i, role in enumerate(ROLES)
    ]
    if rewards is None:
        return Trajectory(trajectory_id=trajectory_id, task_id="t", reward=0.25, calls=calls)
    mean = sum(rewards.values()) / len(rewards)
    return Trajectory(
        trajectory_id=trajectory_id, task_id="t", reward=mean, agent_rewards=rewards, calls=calls
    )


def _agent_of(out: Any) -> str:
    return ROLES[out.prompt_ids[-1] - 2]


def test_per_agent_rewards_make_each_verl_group_one_agent_with_its_own_reward(astuner_config: Path) -> None:
    EpisodeSource._shared.clear()
    tokenizer = qwen25_tokenizer()
    loop = _instantiate(astuner_config, ScriptedServer(tokenizer), tokenizer, _trainer_config())
    repeats = [{"wolf": 1.0, "seer": 0.0}, {"wolf": 0.0, "seer": 0.5}, {"wolf": 1.0, "seer": 1.0}]
    trained = set()
    for uid in [f"uid-{n}" for n in range(6)]:
        outs = []
        for k, rewards in enumerate(repeats):
            game = _game(f"{uid}/{k}", rewards)
            outs.append(loop._output(game, merge_trajectory(game)[0], {"uid": uid}, ()))
        # the repeats of one prompt (one verl uid) hand over the same agent's sample, with its reward
        (agent,) = {_agent_of(out) for out in outs}
        assert [out.reward_score for out in outs] == [rewards[agent] for rewards in repeats]
        assert all(
            out.response_mask == [1, 1] and out.extra_fields["astuner_samples_dropped"] == 1 for out in outs
        )
        trained.add(agent)
    assert trained == set(ROLES)  # across the prompts, every agent trains

    # only trainable agents are picked; without per-agent rewards the first sample and the run's reward
    game = _game("w", {"wolf": 1.0, "seer": 0.0})
    wolf_only = [s for s in merge_trajectory(game)[0] if s.agent_name == "wolf"]
    outs = [loop._output(game, wolf_only, {"uid": f"uid-{n}"}, ("wolf",)) for n in range(6)]
    assert {_agent_of(out) for out in outs} == {"wolf"} and {out.reward_score for out in outs} == {1.0}
    plain = _game("p", None)
    out = loop._output(plain, merge_trajectory(plain)[0], {"uid": "uid-0"}, ())
    assert (_agent_of(out), out.reward_score) == ("wolf", 0.25)


def test_an_agent_that_made_no_call_in_a_run_leaves_that_run_untrained(astuner_config: Path) -> None:
    EpisodeSource._shared.clear()
    tokenizer = qwen25_tokenizer()
    loop = _instantiate(astuner_config, ScriptedServer(tokenizer), tokenizer, _trainer_config())
    game = _game("g", {"wolf": 1.0, "seer": 0.5})
    samples = merge_trajectory(game)[0]
    agent = _agent_of(loop._output(game, samples, {"uid": "uid-0"}, ()))
    others = [s for s in samples if s.agent_name != agent]
    out = loop._output(game, others, {"uid": "uid-0", "raw_prompt": [{"role": "user", "content": "hi"}]}, ())
    assert out.response_mask == [0] and out.reward_score == game.agent_rewards[agent]
    assert f"agent '{agent}'" in out.extra_fields["astuner_error"]


@pytest.mark.parametrize(("targets", "dropped"), [(["seer"], 0), ([], 1)])
def test_a_multi_agent_episode_carries_rewards_and_trainable_targets_to_verl(
    tmp_path: Path, tiny_model_dir: Path, targets: list[str], dropped: int
) -> None:
    EpisodeSource._shared.clear()
    config = _write_config(
        tmp_path, tiny_model_dir, "verl_workflows->AgentRewards", "village", trainable_targets=targets
    )
    tokenizer = qwen25_tokenizer()
    server = ScriptedServer(tokenizer)
    loop = _instantiate(config, server, tokenizer, _trainer_config())
    rewards = {"wolf": 1.0, "seer": 0.5}
    task = Task(task_id="t3", main_query="Play.", metadata={"rewards": rewards})
    out = asyncio.run(loop.run({"temperature": 1.0}, **_row(task)))
    assert len(server.requests) == 2  # both agents generate
    (agent,) = [role for role in ROLES if f"You are the {role}." in tokenizer.decode(out.prompt_ids)]
    # rollout.trainable_targets: only the seer's calls make a sample; else one of the two agents' samples
    assert agent == "seer" if targets else agent in ROLES
    assert out.reward_score == rewards[agent]
    assert out.extra_fields["astuner_samples_dropped"] == dropped
