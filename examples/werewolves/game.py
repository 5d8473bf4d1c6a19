"""The rules of the werewolves game, as pure functions, and the reader that deals the roles.

Five players: two wolves, one seer, two villagers. A round is a day (every
living player says one line, then everyone votes; the most votes lynch, a
tie is broken by lot) and a night (the wolves pick a victim, the seer
learns one player's role). The village wins when both wolves are dead, the
wolves when they are at least as many as the others; the winner is checked
after every phase. The game opens with night 0, in which only the seer
checks a player (a night kill first would give two wolves parity with the
three others at once), then day 1. With these numbers every game is decided
within two rounds.

Two choices in this game are the measurement's, not tradition's: a tied
lynch vote lynching no one handed the wolves nearly every game (a tie on
day 1 means parity after the night: the village won 7% of games played at
random, 14% with the lot), and without night 0 the seer learned nothing
before the only vote of most games.

The model's replies are free text: a choice is the first valid player name a
reply mentions, else a fallback drawn from the run's seed (`run_seed`: the
task's seed and the run's place in its group), the phase and the player. The
same replies in the same run always give the same game; the runs of one task
fall back differently, so a group whose replies are all unusable still plays
different games.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence

from astuner import Task

ROLES = ("wolf", "wolf", "seer", "villager", "villager")
NAMES = ("Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy")


def deal(seed: str) -> dict[str, str]:
    """Five players drawn from NAMES with their roles, player name -> role, in seating order."""
    rng = random.Random(f"werewolves:{seed}")
    names = rng.sample(NAMES, len(ROLES))
    roles = list(ROLES)
    rng.shuffle(roles)
    return dict(zip(names, roles, strict=True))


def mentioned(text: str, candidates: Sequence[str]) -> str | None:
    """The candidate whose name appears first in `text` (whole word, any case), or None."""
    found = [(m.start(), name) for name in candidates if (m := re.search(rf"\b{name}\b", text, re.I))]
    return min(found)[1] if found else None


def run_seed(seed: str, run: int) -> str:
    """The seed of the fallbacks of run `run` (its `repeat_index`) of the task dealt by `seed`.

    Seeded per task alone, every run of a group whose replies name no one would
    replay the same game with the same rewards: a group with no advantage and
    no gradient. Seeded per run, the runs differ, and each stays reproducible.
    """
    return f"{seed}/run-{run}"


def fallback(seed: str, key: str, candidates: Sequence[str]) -> str:
    """The choice made for a reply that names no candidate: fixed by the run's seed and `key`."""
    return random.Random(f"werewolves:{seed}:{key}").choice(sorted(candidates))


def choose(text: str, candidates: Sequence[str], seed: str, key: str) -> tuple[str, bool]:
    """(the player a reply picks, whether the reply named one itself)."""
    name = mentioned(text, candidates)
    return (name, True) if name is not None else (fallback(seed, key, candidates), False)


def most_votes(votes: Mapping[str, str]) -> list[str]:
    """The players with the most votes (voter -> target), in name order; several on a tie."""
    counts = Counter(votes.values())
    top = max(counts.values(), default=0)
    return sorted(name for name, n in counts.items() if n == top)


def winner(roles: Mapping[str, str], alive: Sequence[str]) -> str | None:
    """'village' once both wolves are dead, 'wolves' once they are as many as the others, else None."""
    wolves = sum(roles[name] == "wolf" for name in alive)
    if wolves == 0:
        return "village"
    if wolves >= len(alive) - wolves:
        return "wolves"
    return None


class WerewolvesReader:
    """Tasks of one dealt game each: `metadata` holds the seed and the deal (player -> role).

    Named by import string in werewolves.yaml (`game->WerewolvesReader`); no
    download. Train and validation deals come from different seeds.
    """

    def __init__(self, train_size: int = 1000, validation_size: int = 32) -> None:
        self.sizes = {"train": train_size, "validation": validation_size}

    def read(self, split: str) -> Iterator[Task]:
        for index in range(self.sizes[split]):
            seed = f"{split}-{index}"
            players = deal(seed)
            yield Task(
                task_id=f"werewolves-{seed}",
                main_query="A game of werewolves between " + ", ".join(players) + ".",
                metadata={"seed": seed, "players": players},
            )
