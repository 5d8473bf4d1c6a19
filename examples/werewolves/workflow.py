"""The werewolves game: five AgentScope ReActAgents, one learner per role.

Every player is a `ReActAgent` (no tools, one reasoning step) whose model is
`model_tuner.for_agent(role)`: both wolves' calls are tagged `wolf` and train
one learner (one LoRA adapter on backbone torch), the seer's `seer`, the
villagers' `villager`. A moderator runs the phases of game.py; what a player
hears goes into its memory (AgentScope's multi-agent formatter shows it as
the conversation history), so a player sees the public game so far and its
own secrets: the wolves each other's picks, the seer its checks.

Every question the moderator asks ends with the names a player may answer
(`ask`), and a player is heard saying only the first line of its reply, cut at
`LINE_CHARS` (`heard`): SmolLM2-135M names a valid player far more often when
the names close the prompt and the history is not filled with the rambling of
48-token replies. The choice itself is still read from the whole reply.

The output's metadata holds the deal, the run's place in its group (`run`,
which seeds its fallbacks: game.run_seed), the game log (one entry per speech,
pick, check, vote, kill and lynch) and the winner: the judge (judge.py) scores
each role from it, and the log viewer shows it beside the calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from agentscope.agent import ReActAgent
from agentscope.formatter import DashScopeMultiAgentFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg
from agentscope.tool import Toolkit
from game import choose, fallback, most_votes, run_seed, winner

from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask

RULES = """You are {name}, a {role} in a game of werewolves with {others}.
Two wolves hide among the five players. Each day everyone speaks, then votes to lynch one player.
Each night the wolves kill one player and the seer learns one player's role.
The game opens with night 0: only the seer acts.
The village wins when both wolves are dead; the wolves win when they are as many as the others.
{goal}"""

LINE_CHARS = 120

GOALS = {
    "wolf": "Your fellow wolf is {partner}. Stay hidden and get the others killed.",
    "seer": "Find the wolves and tell the village.",
    "villager": "Find the wolves and vote them out.",
}


def ask(question: str, candidates: Sequence[str]) -> str:
    """The moderator's `question`, closed by the names a player may answer with."""
    return f"{question} Answer with one name: {', '.join(candidates)}."


def heard(text: str) -> str:
    """What the others hear of a reply: its first non-empty line, at most LINE_CHARS characters."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line[:LINE_CHARS]


def make_player(name: str, players: dict[str, str], model: ModelTuner) -> ReActAgent:
    role = players[name]
    partner = next((p for p, r in players.items() if r == "wolf" and p != name), "")
    others = ", ".join(p for p in players if p != name)
    goal = GOALS[role].format(partner=partner)
    agent = ReActAgent(
        name=name,
        sys_prompt=RULES.format(name=name, role=role, others=others, goal=goal),
        model=model.for_agent(role),
        formatter=DashScopeMultiAgentFormatter(),
        toolkit=Toolkit(),
        memory=InMemoryMemory(),
        max_iters=1,
    )
    agent.set_console_output_enabled(False)
    return agent


class Game:
    """One game: the players, who is alive, and the log of everything that happened.

    `run`: the run's place in its group of runs on this deal; it seeds the fallbacks.
    """

    def __init__(self, seed: str, players: dict[str, str], model: ModelTuner, run: int = 0) -> None:
        self.seed, self.roles, self.run = seed, players, run
        self.fallback_seed = run_seed(seed, run)
        self.agents = {name: make_player(name, players, model) for name in players}
        self.alive = list(players)
        self.log: list[dict[str, Any]] = []
        self.round = 0

    async def tell(self, names: Sequence[str], text: str) -> None:
        msg = Msg("Moderator", text, "user")
        for name in names:
            await self.agents[name].observe(msg)

    async def speak(self, name: str, listeners: Sequence[str]) -> str:
        """`name`'s whole reply to what it has heard; `listeners` hear its first line, and so does
        `name` when it remembers what it said."""
        agent = self.agents[name]
        reply = await agent.reply()
        text = reply.get_text_content() or ""
        said = Msg(name, heard(text), "assistant")
        await agent.memory.delete([reply.id])
        await agent.memory.add(said)
        for other in listeners:
            if other != name:
                await self.agents[other].observe(said)
        return text

    async def pick(self, kind: str, name: str, candidates: list[str], listeners: Sequence[str]) -> dict:
        """`name` picks one of `candidates`: the log entry of the pick (its `target`, and whether
        the reply named one itself or fell back)."""
        text = await self.speak(name, listeners)
        target, valid = choose(text, candidates, self.fallback_seed, f"{self.round}:{kind}:{name}")
        return {
            "round": self.round,
            "kind": kind,
            "player": name,
            "target": target,
            "valid": valid,
            "text": text,
        }

    def die(self, kind: str, name: str) -> None:
        self.alive.remove(name)
        self.log.append({"round": self.round, "kind": kind, "player": name, "role": self.roles[name]})

    async def day(self) -> None:
        living = ", ".join(self.alive)
        await self.tell(self.alive, f"Day {self.round}. Alive: {living}. Each of you says one short line.")
        for name in self.alive:
            text = await self.speak(name, self.alive)
            self.log.append({"round": self.round, "kind": "speech", "player": name, "text": text})
        candidates = {name: [p for p in self.alive if p != name] for name in self.alive}
        for name in self.alive:
            await self.tell([name], ask("Vote: whom do you lynch?", candidates[name]))
        # a secret ballot: the votes are cast at once (one batch for the engine)
        ballots = [self.pick("vote", name, candidates[name], ()) for name in self.alive]
        votes = await asyncio.gather(*ballots)
        self.log.extend(votes)
        top = most_votes({vote["player"]: vote["target"] for vote in votes})
        lynched = top[0] if len(top) == 1 else fallback(self.fallback_seed, f"{self.round}:lynch", top)
        self.die("lynch", lynched)
        tie = (
            f"The vote is tied between {' and '.join(top)}; the lot falls on {lynched}. "
            if len(top) > 1
            else ""
        )
        await self.tell(self.alive, f"{tie}{lynched} is lynched. {lynched} was a {self.roles[lynched]}.")

    async def night(self) -> None:
        wolves = [p for p in self.alive if self.roles[p] == "wolf"]
        prey = [p for p in self.alive if self.roles[p] != "wolf"]
        await self.tell(wolves, ask(f"Night {self.round}. Wolves, whom do you kill?", prey))
        picks = [await self.pick("kill_vote", wolf, prey, wolves) for wolf in wolves]
        self.log.extend(picks)
        await self.see()
        top = most_votes({pick["player"]: pick["target"] for pick in picks})
        victim = top[0] if len(top) == 1 else fallback(self.fallback_seed, f"{self.round}:kill", top)
        self.die("kill", victim)
        await self.tell(self.alive, f"Night {self.round} is over. {victim} was killed by the wolves.")

    async def see(self) -> None:
        """The seer, if alive, checks a player and learns (alone) whether it is a wolf."""
        for name in [p for p in self.alive if self.roles[p] == "seer"]:
            others = [p for p in self.alive if p != name]
            await self.tell([name], ask(f"Night {self.round}. Seer, whom do you check?", others))
            check = await self.pick("check", name, others, ())
            self.log.append(check)
            checked = check["target"]
            verdict = "a wolf" if self.roles[checked] == "wolf" else "not a wolf"
            await self.tell([name], f"{checked} is {verdict}.")

    async def play(self) -> str:
        await self.see()  # night 0: the seer's first check, no kill, so day 1 can use what it learned
        while True:
            self.round += 1
            for phase in (self.day, self.night):
                await phase()
                result = winner(self.roles, self.alive)
                if result is not None:
                    return result


class WerewolvesWorkflow(Workflow):
    name: str = "werewolves"

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        task = workflow_task.task
        # the run's place in its group seeds its fallbacks: the runs of one deal play different games
        run = workflow_task.repeat_index
        game = Game(task.metadata["seed"], task.metadata["players"], model_tuner, run=run)
        won = await game.play()
        return WorkflowOutput(
            response=f"The {won} win after {game.round} round(s); alive: {', '.join(game.alive)}.",
            metadata={
                "players": game.roles,
                "run": run,
                "winner": won,
                "rounds": game.round,
                "log": game.log,
            },
        )
