"""The companions `env` and `appworld`: environment services started beside a run.

`astuner run --with-env NAME` serves the reference environment `NAME`
(`astuner envservice serve --env NAME`) where `task_reader.env_service.env_url`
expects it; `--with-appworld` runs the seeds' `$APPWORLD_SCRIPT` in
`$APPWORLD_PATH`. Both are kernel `Companion` processes: the run starts once
their `/healthz` answers, and they are stopped by their own process group.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit

from astuner.api import AstunerError, Companion, SettingsOf
from astuner_judge_envservice.settings import EnvServiceSettings

BUSY_HINT = "Or point task_reader.env_service.env_url at a free port."


def env_service_companion(
    settings: EnvServiceSettings, env_name: str, log_path: str | Path | None = None
) -> Companion:
    """The reference EnvService serving `env_name` where the reader (its `settings`) expects it."""
    url = settings.env_url.rstrip("/")
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "localhost"):
        raise AstunerError(
            f"--with-env starts the environment service on this machine, but "
            f"task_reader.env_service.env_url is {url!r}; use "
            "http://127.0.0.1:<port> (or drop --with-env to use a service elsewhere)."
        )
    if "env_type" in settings.model_fields_set and settings.env_type != env_name:
        raise AstunerError(
            f"--with-env {env_name} serves env_type '{env_name}', but task_reader.env_service.env_type "
            f"is '{settings.env_type}'; make them the same."
        )
    port = parts.port or 80
    argv = [sys.executable, "-m", "astuner", "envservice", "serve", "--env", env_name, "--port", str(port)]
    return Companion(
        f"environment service '{env_name}'",
        argv,
        health_url=f"http://127.0.0.1:{port}/healthz",
        log_path=log_path,
        busy_hint=BUSY_HINT,
    )


def appworld_companion(
    settings: EnvServiceSettings,
    environ: Mapping[str, str] | None = None,
    log_path: str | Path | None = None,
) -> Companion:
    """The seeds' AppWorld service: `$APPWORLD_SCRIPT` run by bash in `$APPWORLD_PATH`.

    It is awaited at the reader's `env_url` (its `settings`).
    """
    environ = os.environ if environ is None else environ
    path, script = environ.get("APPWORLD_PATH"), environ.get("APPWORLD_SCRIPT")
    if not path or not script:
        raise AstunerError(
            "--with-appworld needs APPWORLD_PATH (the unpacked AppWorld EnvService folder, e.g. "
            "/tmp/pack_all_in_one) and APPWORLD_SCRIPT (the command that starts it there, e.g. "
            "'bash EnvService/env_sandbox/appworld.sh') in the environment; "
            f"{'APPWORLD_PATH' if not path else 'APPWORLD_SCRIPT'} is not set."
        )
    if not Path(path).is_dir():
        raise AstunerError(
            f"APPWORLD_PATH={path!r} is not a folder; point it at the unpacked AppWorld service."
        )
    return Companion(
        "AppWorld environment service",
        ["bash", "-c", script],
        cwd=path,
        env=dict(environ),
        health_url=f"{settings.env_url.rstrip('/')}/healthz",
        log_path=log_path,
        startup_timeout=600.0,
        busy_hint=BUSY_HINT,
    )


def serve_env(value: str | None, run_folder: Path, settings_of: SettingsOf) -> Companion:
    """Companion `env` (`--with-env NAME`): the reference service for game `NAME`.

    It serves where the run's `env_service` reader block (`settings_of`) expects it.
    """
    if not value:
        raise AstunerError(
            "--with-env needs the environment to serve, e.g. --with-env guess_number "
            "(astuner envservice serve --help lists them)."
        )
    return env_service_companion(_reader_settings(settings_of), value, log_path=run_folder / "envservice.log")


def serve_appworld(value: str | None, run_folder: Path, settings_of: SettingsOf) -> Companion:
    """Companion `appworld` (`--with-appworld`): the seeds' AppWorld service; takes no value."""
    if value:
        raise AstunerError(
            f"--with-appworld takes no value (got {value!r}); the service is named by APPWORLD_PATH and "
            "APPWORLD_SCRIPT in the environment."
        )
    return appworld_companion(_reader_settings(settings_of), log_path=run_folder / "appworld.log")


def _reader_settings(settings_of: SettingsOf) -> EnvServiceSettings:
    """The run's `task_reader.env_service` block, validated (defaults where the run has none)."""
    return cast(EnvServiceSettings, settings_of("reader", "env_service"))
