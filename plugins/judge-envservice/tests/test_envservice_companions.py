"""Companions `env` and `appworld` (kernel `Companion` processes): asked for by `--with-NAME`,
started, awaited on /healthz, stopped by their own PID."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from astuner_judge_envservice.companions import appworld_companion, env_service_companion
from astuner_judge_envservice.settings import EnvServiceSettings
from envservice_helpers import free_port, instance_counts

from astuner.companions import Companion, companion_requests, companions_for_run
from astuner.components import build_companion
from astuner.config import AstunerConfig, load_config
from astuner.errors import AstunerError
from astuner.plugins import Plugins, Registration

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "env_agent" / "env_agent.yaml"


def _start(
    config: AstunerConfig, plugins: Plugins, folder: Path, registration: Registration, value: str | None
) -> Any:
    """Companion `registration` as a run of `config` in `folder` starts it."""
    return build_companion(config, plugins, registration, value, folder)


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def reader_settings(*overrides: str) -> EnvServiceSettings:
    """The example's `task_reader.env_service` block with `overrides`, as its reader validates it."""
    config = load_config(EXAMPLE, list(overrides))
    return EnvServiceSettings.model_validate(config.task_reader.model_extra["env_service"])


def test_config_errors_name_the_key() -> None:
    remote = reader_settings("task_reader.env_service.env_url=http://10.0.0.5:8080")
    with pytest.raises(AstunerError, match=r"use http://127.0.0.1:<port>"):
        env_service_companion(remote, "guess_number")
    other = reader_settings("task_reader.env_service.env_type=countdown")
    with pytest.raises(AstunerError, match=r"task_reader.env_service.env_type is 'countdown'"):
        env_service_companion(other, "guess_number")
    with pytest.raises(AstunerError, match=r"APPWORLD_PATH .* is not set"):
        appworld_companion(other, environ={"APPWORLD_SCRIPT": "bash run.sh"})
    with pytest.raises(AstunerError, match="is not a folder"):
        appworld_companion(other, environ={"APPWORLD_PATH": "/nonexistent", "APPWORLD_SCRIPT": "x"})


def test_a_run_without_companions_starts_nothing(tmp_path: Path, env_plugins: Plugins) -> None:
    start = partial(_start, load_config(EXAMPLE), env_plugins, tmp_path)
    with companions_for_run(start, env_plugins, {}) as started:
        assert started == []
    assert list(tmp_path.iterdir()) == []


def test_the_command_line_asks_for_companions_by_flag(env_plugins: Plugins) -> None:
    args = ["--with-env", "guess_number", "--with-appworld"]
    assert companion_requests(args, env_plugins) == {"env": "guess_number", "appworld": None}
    assert companion_requests(["--with-env=countdown"], env_plugins) == {"env": "countdown"}
    with pytest.raises(AstunerError, match=r"'--with-envs'.*installed: --with-appworld, --with-env"):
        companion_requests(["--with-envs", "x"], env_plugins)
    config = load_config(EXAMPLE)
    with pytest.raises(AstunerError, match="--with-env needs the environment"):
        build_companion(config, env_plugins, env_plugins.get("companion", "env"), None, Path("."))
    with pytest.raises(AstunerError, match="--with-appworld takes no value"):
        build_companion(config, env_plugins, env_plugins.get("companion", "appworld"), "x", Path("."))


def test_a_command_that_dies_is_reported_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "companion.log"
    dying = Companion(
        "broken service",
        [sys.executable, "-c", "import sys; print('port is taken'); sys.exit(3)"],
        health_url=f"http://127.0.0.1:{free_port()}/healthz",
        log_path=log,
    )
    with pytest.raises(AstunerError, match=r"exited with code 3 .*ends with: port is taken"):
        dying.start()
    assert dying.process is None


def test_a_command_that_never_gets_healthy_is_stopped(tmp_path: Path) -> None:
    silent = Companion(
        "silent service",
        [sys.executable, "-c", "import time; time.sleep(60)"],
        health_url=f"http://127.0.0.1:{free_port()}/healthz",
        startup_timeout=0.5,
    )
    with pytest.raises(AstunerError, match=r"did not answer .* within 0.5 s"):
        silent.start()
    assert silent.process is None  # stopped, and stop() is idempotent
    silent.stop()


@pytest.mark.slow
def test_with_env_serves_the_configured_port_and_stops_exactly_its_process(
    tmp_path: Path, env_plugins: Plugins
) -> None:
    port = free_port()
    config = load_config(EXAMPLE, [f"task_reader.env_service.env_url=http://127.0.0.1:{port}"])
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = partial(_start, config, env_plugins, tmp_path)
        with companions_for_run(start, env_plugins, {"env": "guess_number"}) as [companion]:
            pid = companion.pid
            assert pid is not None and alive(pid)
            assert instance_counts(f"http://127.0.0.1:{port}")["live"] == 0
            with pytest.raises(AstunerError, match="something already answers"):
                env_service_companion(
                    EnvServiceSettings(env_url=f"http://127.0.0.1:{port}"), "guess_number"
                ).start()
        assert not alive(pid)
        assert "Starting server on" in (tmp_path / "envservice.log").read_text()
        assert alive(bystander.pid)  # an unrelated python process is left alone
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/healthz")
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.slow
def test_with_appworld_runs_the_script_and_stops_its_children(tmp_path: Path) -> None:
    port = free_port()
    settings = EnvServiceSettings(env_url=f"http://127.0.0.1:{port}")
    # A stand-in for the AppWorld launcher: a script that starts the service as its child.
    script = (
        f"{sys.executable} -m astuner envservice serve --env guess_number --port {port} & "
        "echo $! > child.pid; wait"
    )
    environ = {**os.environ, "APPWORLD_PATH": str(tmp_path), "APPWORLD_SCRIPT": script}
    with appworld_companion(settings, environ=environ) as companion:
        child = int((tmp_path / "child.pid").read_text())
        assert alive(companion.pid) and alive(child)
        profile = httpx.post(f"http://127.0.0.1:{port}/get_env_profile", json={"env_type": "guess_number"})
        assert json.loads(profile.text)["data"][0] == "train-0000"
    assert not alive(child)


def test_a_companion_stops_when_its_run_is_killed(tmp_path: Path) -> None:
    """`kill -9` of the run: the kernel sends the companion SIGTERM (PR_SET_PDEATHSIG)."""
    port = free_port()
    run = (
        "import sys, time\n"
        "from astuner_judge_envservice.companions import env_service_companion\n"
        "from astuner_judge_envservice.settings import EnvServiceSettings\n"
        f"settings = EnvServiceSettings(env_url='http://127.0.0.1:{port}')\n"
        "companion = env_service_companion(settings, 'guess_number').start()\n"
        "print(companion.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", run], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert alive(child) and httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        parent.kill()  # SIGKILL: no exit path of the run's own runs
        parent.wait(timeout=10)
        deadline = time.monotonic() + 15
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(child)
    finally:
        parent.kill()
