"""Entry point of `astuner-judge-envservice`: reader and judge `env_service`, command `envservice`,
companions `env` and `appworld` (`astuner run --with-env NAME`, `--with-appworld`).

Importing this module is cheap: the server (FastAPI, uvicorn) loads only
when `astuner envservice serve` runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from astuner.api import Register, hookimpl
from astuner_judge_envservice.companions import serve_appworld, serve_env
from astuner_judge_envservice.judge import EnvServiceJudge, EnvServiceJudgeSettings
from astuner_judge_envservice.reader import EnvServiceReader
from astuner_judge_envservice.settings import EnvServiceSettings

if TYPE_CHECKING:
    import typer


@hookimpl
def register_readers(register: Register) -> None:
    register(
        "env_service",
        EnvServiceReader,
        settings=EnvServiceSettings,
        summary="Task ids from an EnvService (/get_env_profile); one environment instance per rollout.",
    )


@hookimpl
def register_judges(register: Register) -> None:
    register(
        "env_service",
        EnvServiceJudge,
        settings=EnvServiceJudgeSettings,
        summary="Reward from the environment's /evaluate score (success: 1 + 0.5·s, else 0.5·s).",
        old_names=("env_service_as_judge->EnvServiceJudge",),
    )


@hookimpl
def register_companions(register: Register) -> None:
    register(
        "env",
        serve_env,
        summary="NAME: the reference EnvService serving game NAME at task_reader.env_service.env_url.",
    )
    register(
        "appworld",
        serve_appworld,
        summary="the seeds' AppWorld service: $APPWORLD_SCRIPT run in $APPWORLD_PATH (no value).",
    )


@hookimpl
def register_commands(cli: typer.Typer) -> None:
    from astuner_judge_envservice.commands import envservice_app

    cli.add_typer(envservice_app, name="envservice")
