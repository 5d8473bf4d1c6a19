"""The reference EnvService: text games served over the EnvService protocol.

`create_app(...)` builds the FastAPI app; `GAMES` names the environments
`astuner envservice serve --env NAME` can serve.
"""

from astuner_judge_envservice.server.app import create_app
from astuner_judge_envservice.server.games import GAMES

__all__ = ["GAMES", "create_app"]
