"""The environments the reference server can serve, by `env_type`."""

from __future__ import annotations

from astuner_judge_envservice.server.base import Game
from astuner_judge_envservice.server.countdown import Countdown
from astuner_judge_envservice.server.guess_number import GuessNumber

GAMES: dict[str, type[Game]] = {"guess_number": GuessNumber, "countdown": Countdown}
