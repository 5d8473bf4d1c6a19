"""The werewolves judge: one reward per role, from the game log the workflow returns.

A role's reward is its team's result, +1 for a win and -1 for a loss, plus
a little shaping for play that helps its team (0.1 each, at most 0.4 in
all, so the sign is always the result and `agent/<role>/win_rate` is the
team's win rate):

- wolf: each villager or seer who died (killed or lynched);
- seer: each wolf it checked (each wolf once);
- villager: each day vote a villager cast on a wolf.

Both wolves share the `wolf` reward, both villagers the `villager` one: the
learner is the role. `is_success` is the village's win.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from astuner import JudgeOutput, Task, WorkflowOutput

SHAPING = 0.1


def role_rewards(players: Mapping[str, str], won: str, log: list[dict[str, Any]]) -> dict[str, float]:
    """The reward of each role of a finished game (`won`: 'village' or 'wolves')."""
    deaths = [e["player"] for e in log if e["kind"] in ("kill", "lynch")]
    checked = {e["target"] for e in log if e["kind"] == "check" and players[e["target"]] == "wolf"}
    votes = [e for e in log if e["kind"] == "vote" and players[e["player"]] == "villager"]
    shaping = {
        "wolf": sum(players[name] != "wolf" for name in deaths),
        "seer": len(checked),
        "villager": sum(players[e["target"]] == "wolf" for e in votes),
    }
    outcome = {"wolf": 1.0 if won == "wolves" else -1.0}
    outcome["seer"] = outcome["villager"] = -outcome["wolf"]
    return {role: outcome[role] + SHAPING * shaping[role] for role in outcome}


class WerewolvesJudge:
    async def judge(self, task: Task, output: WorkflowOutput) -> JudgeOutput:
        meta = output.metadata
        players, log = meta["players"], meta["log"]
        village_won = meta["winner"] == "village"
        invalid = sum(not e["valid"] for e in log if "valid" in e)
        choices = sum("valid" in e for e in log)
        lynched = [e["player"] for e in log if e["kind"] == "lynch"]
        return JudgeOutput(
            reward=role_rewards(players, meta["winner"], log),
            is_success=village_won,
            metrics={
                "village_won": float(village_won),
                "rounds": float(meta["rounds"]),
                "invalid_votes": float(invalid),
                "invalid_vote_rate": invalid / max(choices, 1),
                "wolves_lynched": float(sum(players[name] == "wolf" for name in lynched)),
            },
        )
