"""The werewolves judge: one reward per role, from the game log the workflow returns.

A role's reward is its team's result, +1 for a win and -1 for a loss, plus
two small shapings, at most 0.6 in all, so the sign is always the result and
`agent/<role>/win_rate` is the team's win rate:

- play that helps the team, 0.1 each (at most 0.4): for the wolf, each
  villager or seer who died (killed or lynched); for the seer, each wolf it
  checked (each wolf once); for the villager, each day vote a villager cast
  on a wolf;
- well-formed choices, up to 0.2: WELL_FORMED times the share of the role's
  choices (day votes, wolf picks, seer checks) whose reply named a player it
  may pick rather than falling back (game.choose). When every run of a deal
  ends the same way, this is what still tells the runs apart: the run whose
  replies were usable gets the higher reward, so a small model can learn to
  answer with a name while it cannot yet win.

Both wolves share the `wolf` reward, both villagers the `villager` one: the
learner is the role. `is_success` is the village's win.

Metrics: the game's (`village_won`, `rounds`, `invalid_votes`,
`invalid_vote_rate`, `wolves_lynched`), and per role, named
`agent/<role>/<metric>` so the roll-up charts them per agent:
`fallback_rate` (the share of the role's choices that fell back) and
`choices` (how many choices the role made in the game).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from astuner import JudgeOutput, Task, WorkflowOutput

SHAPING = 0.1
WELL_FORMED = 0.2


def role_choices(players: Mapping[str, str], log: list[dict[str, Any]]) -> dict[str, list[bool]]:
    """Per role, whether each of its choices (an entry with `valid`) named a player itself."""
    choices: dict[str, list[bool]] = {role: [] for role in players.values()}
    for entry in log:
        if "valid" in entry:
            choices[players[entry["player"]]].append(entry["valid"])
    return choices


def well_formed_share(valid: list[bool]) -> float:
    """The share of choices that named a player (0 for a role that made none)."""
    return sum(valid) / len(valid) if valid else 0.0


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
    choices = role_choices(players, log)
    outcome = {"wolf": 1.0 if won == "wolves" else -1.0}
    outcome["seer"] = outcome["villager"] = -outcome["wolf"]
    return {
        role: outcome[role] + SHAPING * shaping[role] + WELL_FORMED * well_formed_share(choices[role])
        for role in outcome
    }


class WerewolvesJudge:
    async def judge(self, task: Task, output: WorkflowOutput) -> JudgeOutput:
        meta = output.metadata
        players, log = meta["players"], meta["log"]
        village_won = meta["winner"] == "village"
        invalid = sum(not e["valid"] for e in log if "valid" in e)
        choices = sum("valid" in e for e in log)
        lynched = [e["player"] for e in log if e["kind"] == "lynch"]
        metrics = {
            "village_won": float(village_won),
            "rounds": float(meta["rounds"]),
            "invalid_votes": float(invalid),
            "invalid_vote_rate": invalid / max(choices, 1),
            "wolves_lynched": float(sum(players[name] == "wolf" for name in lynched)),
        }
        for role, valid in role_choices(players, log).items():
            metrics[f"agent/{role}/choices"] = float(len(valid))
            if valid:  # a role that chose nothing has no rate: it stays out of the mean
                metrics[f"agent/{role}/fallback_rate"] = 1.0 - well_formed_share(valid)
        return JudgeOutput(
            reward=role_rewards(players, meta["winner"], log),
            is_success=village_won,
            metrics=metrics,
        )
