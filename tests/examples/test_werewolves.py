"""The werewolves example: its deals, rules and per-role judge, a scripted game, and a debug run."""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from astuner import Task, WorkflowOutput, WorkflowTask
from astuner.config import load_config
from astuner.record import read_trajectories
from astuner.rollout.agents import agent_plan
from astuner.testing.records import rollout_rows

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "werewolves"
DEAL = {"Alice": "villager", "Bob": "wolf", "Carol": "seer", "Dave": "wolf", "Erin": "villager"}


@pytest.fixture(scope="module")
def example() -> Iterator[dict[str, ModuleType]]:
    """game.py, judge.py and workflow.py, imported as the kernel does: from the example's folder."""
    names = ("game", "judge", "workflow")  # workflow.py imports `game` by this name
    for name in names:  # another example's `workflow` module, imported earlier in this process
        sys.modules.pop(name, None)
    sys.path.insert(0, str(EXAMPLE))
    try:
        yield {name: importlib.import_module(name) for name in names}
    finally:
        sys.path.remove(str(EXAMPLE))
        for name in names:
            sys.modules.pop(name, None)


class Scripted:
    """A model handle whose players all say `text`, whatever they are asked; `for_agent` as ModelTuner's."""

    def __init__(self, text: str) -> None:
        self.text = text

    def for_agent(self, role: str) -> Any:
        from agentscope.message import TextBlock
        from agentscope.model import ChatModelBase, ChatResponse

        text = self.text

        class Model(ChatModelBase):
            async def __call__(self, messages: list[dict[str, Any]], **kwargs: Any) -> ChatResponse:
                return ChatResponse(content=[TextBlock(type="text", text=text)])

        return Model(model_name=role, stream=False)


def play(example: dict[str, ModuleType], text: str) -> Any:
    game = example["workflow"].Game("train-0", dict(DEAL), Scripted(text))
    return game, asyncio.run(game.play())


def test_the_config_trains_wolf_and_seer_each_on_an_adapter() -> None:
    config = load_config(EXAMPLE / "werewolves.yaml")
    assert config.model.path == "builtin:smollm2-135m-instruct"
    assert config.backbone == "debug"
    assert config.task_reader.type == "game->WerewolvesReader"
    assert config.task_judge.judge_protocol == "judge->WerewolvesJudge"
    plan = agent_plan(
        config.agents,
        trainable_targets=config.rollout.trainable_targets,
        shared_lora_rank=config.model.lora.rank,
    )
    assert plan.trainable == ("wolf", "seer")
    assert {name: lora.rank for name, lora in plan.trained_adapters.items()} == {"wolf": 8, "seer": 8}
    # replies cut at 48 tokens are the config's choice: the truncation check says so, it does not warn
    assert config.rollout.max_response_length_in_one_turn == 48
    assert config.health.acknowledged == ["truncation"]


def test_the_reader_deals_the_same_roles_every_time(example: dict[str, ModuleType]) -> None:
    reader = example["game"].WerewolvesReader(train_size=20, validation_size=5)
    train = list(reader.read("train"))
    assert train == list(example["game"].WerewolvesReader(train_size=20).read("train"))
    assert [t.task_id for t in train[:2]] == ["werewolves-train-0", "werewolves-train-1"]
    for task in train:
        players = task.metadata["players"]
        assert sorted(players.values()) == ["seer", "villager", "villager", "wolf", "wolf"]
        assert task.main_query.endswith(", ".join(players) + ".")
    deals = {tuple(t.metadata["players"].items()) for t in train}
    assert len(deals) == 20  # names and roles vary from task to task
    validation = list(reader.read("validation"))
    assert [t.metadata["seed"] for t in validation] == [f"validation-{i}" for i in range(5)]


def test_a_choice_is_the_first_valid_name_a_reply_mentions(example: dict[str, ModuleType]) -> None:
    game = example["game"]
    candidates = ["Alice", "Bob", "Dave"]
    assert game.mentioned("I think dave did it, or Bob.", candidates) == "Dave"
    assert game.mentioned("Carol said Bob!", candidates) == "Bob"  # Carol is not a candidate
    assert game.mentioned("Bobby and Alicea", candidates) is None  # whole names only
    assert game.choose("Vote: Alice", candidates, "s", "1:vote:Bob") == ("Alice", True)
    name, valid = game.choose("I like turtles", candidates, "s", "1:vote:Bob")
    assert not valid and name in candidates
    # the fallback is fixed by the task's seed and the phase and player, whatever the order of candidates
    assert all(game.fallback("s", "1:vote:Bob", candidates[::-1]) == name for _ in range(3))
    fallbacks = {game.fallback(seed, "1:vote:Bob", candidates) for seed in map(str, range(30))}
    assert fallbacks == set(candidates)


def test_win_conditions_and_vote_counts(example: dict[str, ModuleType]) -> None:
    game = example["game"]
    assert game.winner(DEAL, list(DEAL)) is None
    assert game.winner(DEAL, ["Alice", "Carol", "Erin"]) == "village"  # both wolves dead
    assert game.winner(DEAL, ["Alice", "Bob", "Dave", "Erin"]) == "wolves"  # 2 wolves, 2 others
    assert game.winner(DEAL, ["Alice", "Bob", "Carol"]) is None  # 1 wolf, 2 others
    assert game.winner(DEAL, ["Alice", "Bob"]) == "wolves"
    assert game.most_votes({"Alice": "Bob", "Carol": "Bob", "Dave": "Alice"}) == ["Bob"]
    assert game.most_votes({"Alice": "Bob", "Bob": "Alice"}) == ["Alice", "Bob"]  # a tie


def test_a_village_that_names_the_wolves_lynches_both(example: dict[str, ModuleType]) -> None:
    game, won = play(example, "Bob is a wolf, and so is Dave.")
    assert won == "village" and game.round == 2
    deaths = [(e["kind"], e["player"]) for e in game.log if e["kind"] in ("kill", "lynch")]
    assert deaths[0] == ("lynch", "Bob") and deaths[-1] == ("lynch", "Dave")
    checks = [(e["round"], e["player"], e["target"]) for e in game.log if e["kind"] == "check"]
    assert checks == [(0, "Carol", "Bob"), (1, "Carol", "Dave")]  # night 0, before day 1, and night 1
    seer_memory = asyncio.run(game.agents["Carol"].memory.get_memory())
    assert any(m.name == "Moderator" and "is a wolf." in m.get_text_content() for m in seer_memory)
    wolf_picks = [e for e in game.log if e["kind"] == "kill_vote"]
    assert wolf_picks and not any(e["valid"] for e in wolf_picks)  # a wolf may not pick a wolf: fallback


def test_nonsense_replies_still_finish_the_game_reproducibly(example: dict[str, ModuleType]) -> None:
    game, won = play(example, "The weather is nice.")
    again, won_again = play(example, "The weather is nice.")
    assert (won, game.log) == (won_again, again.log)
    assert game.round <= 2
    choices = [e for e in game.log if "valid" in e]
    assert choices and not any(e["valid"] for e in choices)


def test_the_judge_rewards_each_role(example: dict[str, ModuleType]) -> None:
    game, won = play(example, "Bob is a wolf, and so is Dave.")
    output = WorkflowOutput(metadata={"players": DEAL, "winner": won, "rounds": game.round, "log": game.log})
    verdict = asyncio.run(example["judge"].WerewolvesJudge().judge(Task(task_id="t"), output))
    assert verdict.is_success
    (killed,) = [e["player"] for e in game.log if e["kind"] == "kill"]  # night 1: one of the village
    villager_votes = [e for e in game.log if e["kind"] == "vote" and DEAL[e["player"]] == "villager"]
    assert len(villager_votes) == (3 if DEAL[killed] == "villager" else 4)  # all on Bob, then Dave
    # the result, 0.1 per helpful play, 0.2 times the share of the role's choices that named a player:
    # the wolves name each other on day 1 (valid), Dave no one he may pick later (2 of 4 valid);
    # the seer checks both wolves, on night 0 and night 1
    expected = {
        "wolf": -1.0 + 0.1 + 0.2 * 2 / 4,
        "seer": 1.0 + 0.2 + 0.2,
        "villager": 1.0 + 0.1 * len(villager_votes) + 0.2,
    }
    assert verdict.reward == pytest.approx(expected)
    assert verdict.metrics["village_won"] == 1.0 and verdict.metrics["rounds"] == 2.0
    assert verdict.metrics["wolves_lynched"] == 2.0
    # Dave, the wolf left, names no one he may pick: at night (a wolf), on day 2 (himself, dead Bob)
    assert verdict.metrics["invalid_votes"] == 2.0
    lost = example["judge"].role_rewards(DEAL, "wolves", [{"kind": "kill", "player": "Alice"}])
    assert lost == pytest.approx({"wolf": 1.1, "seer": -1.0, "villager": -1.0})


def run(example: dict[str, ModuleType], text: str, repeat_index: int) -> tuple[WorkflowOutput, Any]:
    """Run `repeat_index` of a group on train-0's deal, every player saying `text`: output, verdict."""
    task = Task(task_id="werewolves-train-0", metadata={"seed": "train-0", "players": dict(DEAL)})
    workflow_task = WorkflowTask(task=task, group_id="step-1-0", repeat_index=repeat_index)
    output = asyncio.run(example["workflow"].WerewolvesWorkflow().execute(workflow_task, Scripted(text)))
    verdict = asyncio.run(example["judge"].WerewolvesJudge().judge(task, output))
    return output, verdict


def test_the_runs_of_one_deal_fall_back_differently(example: dict[str, ModuleType]) -> None:
    """Replies that name no one: each run of a group plays its own game, the same one every time."""
    runs = [run(example, "The weather is nice.", index) for index in range(6)]
    games = [
        [(e["kind"], e["player"], e["target"]) for e in out.metadata["log"] if "valid" in e]
        for out, _ in runs
    ]
    assert [out.metadata["run"] for out, _ in runs] == list(range(6))
    assert len({tuple(game) for game in games}) > 1  # the fallbacks differ between the runs
    rewards = [verdict.reward for _, verdict in runs]
    assert len({reward["wolf"] for reward in rewards}) > 1  # so the group has an advantage to learn from
    assert len({reward["seer"] for reward in rewards}) > 1
    again, _ = run(example, "The weather is nice.", 3)
    assert again.metadata["log"] == runs[3][0].metadata["log"]  # and each run is reproducible
    game = example["game"]
    assert game.run_seed("train-0", 3) != game.run_seed("train-0", 4) != game.run_seed("train-1", 4)


def test_every_day_lynches_and_the_seer_checks_before_day_one(example: dict[str, ModuleType]) -> None:
    """A tie is broken by lot (a tie lynching no one gave the wolves parity after the night)."""
    tied_days = 0
    for index in range(6):
        output, _ = run(example, "The weather is nice.", index)
        log, rounds = output.metadata["log"], output.metadata["rounds"]
        assert [e["round"] for e in log if e["kind"] == "lynch"] == list(range(1, rounds + 1))
        assert log[0]["kind"] == "check" and log[0]["round"] == 0
        for day in range(1, rounds + 1):
            votes = {e["player"]: e["target"] for e in log if e["kind"] == "vote" and e["round"] == day}
            tied_days += len(example["game"].most_votes(votes)) > 1
    assert tied_days  # the lot was drawn


def test_a_well_formed_choice_rewards_more_than_a_fallback_and_keeps_the_sign(
    example: dict[str, ModuleType],
) -> None:
    judge = example["judge"]
    game, won = play(example, "The weather is nice.")
    fell_back = judge.role_rewards(DEAL, won, game.log)
    named = judge.role_rewards(DEAL, won, [{**e, "valid": True} if "valid" in e else e for e in game.log])
    for role in ("wolf", "seer", "villager"):  # the same game, every choice named: WELL_FORMED more
        assert named[role] == pytest.approx(fell_back[role] + judge.WELL_FORMED)
    # the most shaping a losing team can get, every choice well formed: its reward stays negative
    village_lost = [
        {"kind": "check", "player": "Carol", "target": "Bob", "valid": True},
        {"kind": "check", "player": "Carol", "target": "Dave", "valid": True},
        *[{"kind": "vote", "player": v, "target": "Bob", "valid": True} for v in ("Alice", "Erin") * 2],
    ]
    lost = judge.role_rewards(DEAL, "wolves", village_lost)
    assert lost["wolf"] > 0 and lost["seer"] < 0 and lost["villager"] < 0
    assert lost["villager"] == pytest.approx(-1.0 + 0.4 + judge.WELL_FORMED)
    wolves_lost = [
        {"kind": "kill", "player": "Alice"},
        {"kind": "lynch", "player": "Erin"},
        {"kind": "kill_vote", "player": "Bob", "target": "Alice", "valid": True},
    ]
    lost = judge.role_rewards(DEAL, "village", wolves_lost)
    assert lost["wolf"] == pytest.approx(-1.0 + 0.2 + judge.WELL_FORMED) and lost["seer"] > 0


def test_the_judge_reports_fallbacks_per_role(example: dict[str, ModuleType]) -> None:
    _, named = run(example, "Bob is a wolf, and so is Dave.", 0)
    metrics = named.metrics
    # Bob and Dave name each other on day 1; Dave names no one he may pick at night and on day 2
    assert metrics["agent/wolf/choices"] == 4.0 and metrics["agent/wolf/fallback_rate"] == 0.5
    assert metrics["agent/seer/fallback_rate"] == 0.0 and metrics["agent/villager/fallback_rate"] == 0.0
    assert metrics["agent/seer/choices"] == 4.0  # two checks and two day votes
    assert {"village_won", "rounds", "invalid_votes", "invalid_vote_rate", "wolves_lynched"} <= set(metrics)
    _, nonsense = run(example, "The weather is nice.", 0)
    assert {nonsense.metrics[f"agent/{role}/fallback_rate"] for role in ("wolf", "seer", "villager")} == {1.0}


def test_a_question_ends_with_the_names_and_a_player_is_heard_by_its_first_line(
    example: dict[str, ModuleType],
) -> None:
    reply = "Bob is a wolf, and so is Dave.  \nI am sure of it, believe me."
    game, _ = play(example, reply)
    memory = {name: asyncio.run(agent.memory.get_memory()) for name, agent in game.agents.items()}
    # Alice (villager) is asked to vote among the living others, Bob (wolf) at night among the prey
    asked = [m.get_text_content() for m in memory["Alice"] if m.name == "Moderator"]
    assert "Vote: whom do you lynch? Answer with one name: Bob, Carol, Dave, Erin." in asked
    night = [m.get_text_content() for m in memory["Dave"] if "kill?" in m.get_text_content()]
    assert night and night[0].endswith("Answer with one name: Alice, Carol, Erin.")
    # everyone, the speaker too, remembers the first line of a reply; the log keeps it whole
    said = {m.get_text_content() for name in DEAL for m in memory[name] if m.name in DEAL}
    assert said == {"Bob is a wolf, and so is Dave."}
    assert {e["text"] for e in game.log if "text" in e} == {reply}
    assert example["workflow"].heard("x" * 500) == "x" * example["workflow"].LINE_CHARS


def test_debug_run_tags_calls_by_role_and_rewards_each(tiny_model_dir: Path, tmp_path: Path) -> None:
    """`astuner run --backbone debug` of the example on a tiny random-weight model (noise replies)."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "astuner",
            "run",
            "--conf",
            "examples/werewolves/werewolves.yaml",
            "--backbone",
            "debug",
            "-o",
            f"model.path={tiny_model_dir}",
            "-o",
            "rollout.max_response_length_in_one_turn=16",
            "-o",
            f"experiment_dir={tmp_path / 'records'}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "replies were cut" not in result.stderr  # noise replies, cut at 16 tokens: acknowledged
    assert "health check 'truncation' holds, acknowledged in the config" in result.stderr
    (rollout_file,) = (tmp_path / "records").glob("werewolves/*/rollouts/debug.jsonl")
    trajectories = list(read_trajectories(rollout_file))
    assert len(trajectories) == 2
    for trajectory in trajectories:
        assert trajectory.error is None, trajectory.error
        assert set(trajectory.agent_rewards) == {"wolf", "seer", "villager"}
        roles = {call.agent_name for call in trajectory.calls}
        assert roles <= {"wolf", "seer", "villager"} and {"wolf", "villager"} <= roles
        for call in trajectory.calls:
            assert call.trainable == (call.agent_name in ("wolf", "seer"))
            assert call.response_ids and len(call.response_ids) <= 16
    line = rollout_rows(rollout_file)[0]
    game = line["metadata"]["workflow_output"]["metadata"]  # the game, for the judge and the viewer
    assert game["players"] == line["metadata"]["task"]["metadata"]["players"]
    assert {e["kind"] for e in game["log"]} >= {"speech", "vote"}
    votes = [e for e in game["log"] if e["kind"] == "vote"]
    assert all(e["target"] in game["players"] and e["target"] != e["player"] for e in votes)
    assert line["metrics"]["invalid_votes"] == sum(not e["valid"] for e in game["log"] if "valid" in e)
