"""`guess_number`: find a secret integer with higher/lower feedback.

The secret lies in 1..`high` (20, 50 or 100 by task); the agent has
`max_guesses` (one more than a binary search needs: 6, 7 or 8). Step
reward: 1.0 for the right guess, 0.1 for a guess
inside the range the feedback so far allows (a useful guess), else 0.
Score: 1.0 when found; otherwise 0.5·(how far the feasible range shrank),
so bisecting well scores better than guessing at random.
"""

from __future__ import annotations

import math
import re
from typing import Any

from astuner_judge_envservice.server.base import Episode, Game, StepResult

_GUESS = re.compile(r"guess\s*[:=]?\s*(-?\d+)", re.IGNORECASE)
_INTEGER = re.compile(r"-?\d+")


def parse_guess(text: str) -> int | None:
    """`Guess: 25` if present, else the last integer in the text."""
    marked = _GUESS.findall(text)
    if marked:
        return int(marked[-1])
    numbers = _INTEGER.findall(text)
    return int(numbers[-1]) if numbers else None


class GuessNumberEpisode(Episode):
    def __init__(self, secret: int, high: int, max_guesses: int) -> None:
        self.secret, self.high, self.max_guesses = secret, high, max_guesses
        self.low_bound, self.high_bound = 1, high  # the range the feedback so far allows
        self.guesses: list[int] = []
        self.solved = False

    def initial_state(self) -> list[dict[str, Any]]:
        system = (
            "You are playing a number guessing game. The user has picked a secret integer. "
            "Each turn, reply with exactly one guess in the form 'Guess: N'. The user answers "
            "'higher' if the secret is larger than your guess and 'lower' if it is smaller. "
            "Use the feedback to find the secret in as few guesses as possible."
        )
        user = (
            f"I picked a secret integer between 1 and {self.high}. "
            f"You have {self.max_guesses} guesses. What is your first guess?"
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def step(self, text: str) -> StepResult:
        guess = parse_guess(text)
        left = self.max_guesses - len(self.guesses) - 1
        if guess is None:
            self.guesses.append(0)
            feedback = f"I found no number in your reply. Answer like 'Guess: {self.low_bound}'."
            return self._result(feedback, 0.0, left)
        self.guesses.append(guess)
        if guess == self.secret:
            self.solved = True
            return StepResult(f"Correct! The secret was {self.secret}.", 1.0, True, {"guess": guess})
        useful = self.low_bound <= guess <= self.high_bound
        if guess < self.secret:
            self.low_bound = max(self.low_bound, guess + 1)
            feedback = f"{guess} is too low: the secret is higher."
        else:
            self.high_bound = min(self.high_bound, guess - 1)
            feedback = f"{guess} is too high: the secret is lower."
        return self._result(feedback, 0.1 if useful else 0.0, left, guess)

    def _result(self, feedback: str, reward: float, left: int, guess: int | None = None) -> StepResult:
        if left <= 0:
            return StepResult(f"{feedback} No guesses left; the secret was {self.secret}.", reward, True)
        return StepResult(f"{feedback} {left} guesses left.", reward, False, {"guess": guess})

    def score(self, sparse: bool) -> float:
        if self.solved or sparse:
            return float(self.solved)
        shrink = 1.0 - (self.high_bound - self.low_bound + 1) / self.high
        return round(0.5 * shrink, 4)

    def info(self) -> dict[str, Any]:
        return {
            "game": "guess_number",
            "range": [1, self.high],
            "max_guesses": self.max_guesses,
            "guesses": list(self.guesses),
            "action_format": "Guess: N",
        }


class GuessNumber(Game):
    name = "guess_number"

    def episode(self, task_id: str, params: dict[str, Any]) -> GuessNumberEpisode:
        rng = self.rng(task_id)
        high = rng.choice((20, 50, 100))
        max_guesses = math.ceil(math.log2(high + 1)) + 1
        return GuessNumberEpisode(rng.randint(1, high), high, max_guesses)
