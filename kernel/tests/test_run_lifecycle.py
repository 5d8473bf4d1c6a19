"""A run's life: status.json start to end, notifiers told once, closing lines, errors before the folder."""

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest
import yaml
from pydantic import BaseModel
from typer.testing import CliRunner

from astuner import hookimpl
from astuner.cli import make_app
from astuner.config import load_config
from astuner.errors import AstunerError
from astuner.logs import get_logger
from astuner.plugins import Plugins
from astuner.record import append_rows
from astuner.run_status import end_run, mark_running, read_status
from astuner.testing.backbones import EndingBackbone, EndSettings, only_run, run_ending


class Hears:
    """A notifier that remembers what it was told (or hangs, or breaks)."""

    told: ClassVar[list] = []

    def __init__(self, settings: "HearsSettings") -> None:
        self.settings = settings

    def notify(self, summary) -> None:
        if self.settings.behaviour == "hang":
            time.sleep(5)
        if self.settings.behaviour == "break":
            raise ValueError("no route to the pager")
        Hears.told.append(summary)


class HearsSettings(BaseModel):
    behaviour: str = "listen"


@pytest.fixture
def app(plugins: Plugins):
    def register_backbones(register):
        register("ending", EndingBackbone, settings=EndSettings)

    def register_notifiers(register):
        register("hears", Hears, settings=HearsSettings)

    plugins.add(
        SimpleNamespace(
            register_backbones=hookimpl(register_backbones), register_notifiers=hookimpl(register_notifiers)
        ),
        name="lifecycle",
    )
    Hears.told = []
    return make_app(plugins)


def test_a_finished_run_says_so_tells_its_notifiers_and_what_to_do_next(app, write_config, workdir) -> None:
    conf = write_config({"notify": {"hears": {}}}, name="done.yaml")
    result = run_ending(app, conf)
    assert result.exit_code == 0, result.output
    folder = only_run(workdir, "done")
    status = read_status(folder)
    assert (status.state, status.command, status.pid) == ("finished", "run", os.getpid()) and status.ended
    (summary,) = Hears.told
    assert (summary.status, summary.steps, summary.name, summary.command) == ("finished", 2, "done", "run")
    assert summary.last_metrics == {"train/reward_mean": 0.5}
    assert summary.checkpoint == str(folder / "checkpoints" / "step_2")
    closing = result.stdout.strip().splitlines()[-4:]
    assert closing[0].startswith("run finished after ") and closing[0].endswith(f"2 steps: {folder}")
    assert closing[1:] == [  # no records line: this run wrote no rollouts/
        f"  checkpoint:  {folder}/checkpoints/step_2",
        f"  look:        astuner logview {folder}  (needs astuner-logview)",
        f"  evaluate:    astuner eval --conf {folder}/config.yaml --checkpoint {folder}/checkpoints/step_2"
        "  (needs astuner-eval)",
    ]


def test_the_next_steps_plugins_provide_are_given_plainly(plugins: Plugins, write_config, workdir) -> None:
    def register_backbones(register):
        register("ending", EndingBackbone, settings=EndSettings)

    def register_commands(cli):
        cli.command("logview")(lambda: None)
        cli.command("eval")(lambda: None)

    hooks = {"register_backbones": register_backbones, "register_commands": register_commands}
    plugins.add(SimpleNamespace(**{name: hookimpl(f) for name, f in hooks.items()}), name="next-steps")
    result = run_ending(make_app(plugins), write_config({}, name="plain.yaml"))
    assert result.exit_code == 0, result.output
    folder = only_run(workdir, "plain")
    closing = result.stdout.strip().splitlines()[-2:]
    assert closing == [
        f"  look:        astuner logview {folder}",
        f"  evaluate:    astuner eval --conf {folder}/config.yaml --checkpoint {folder}/checkpoints/step_2",
    ]


def test_a_failed_and_a_killed_run_say_why(app, write_config, workdir) -> None:
    result = run_ending(
        app, write_config({"ending": {"outcome": "fail"}, "notify": {"hears": {}}}, name="bad.yaml")
    )
    assert result.exit_code == 1
    status = read_status(only_run(workdir, "bad"))
    assert str(status) == "failed: RuntimeError: the judge fell over"
    assert Hears.told[-1].status == "failed" and Hears.told[-1].reason == status.reason
    assert "run failed (RuntimeError: the judge fell over)" in result.stdout
    assert "  why:         the end of" in result.stdout

    result = run_ending(app, write_config({"ending": {"outcome": "interrupt"}}, name="stopped.yaml"))
    assert str(read_status(only_run(workdir, "stopped"))) == "killed: interrupted (Ctrl-C)"
    assert "  resume:      astuner run --conf" in result.stdout


def test_a_running_folder_whose_process_is_gone_reads_as_killed(tmp_path: Path) -> None:
    mark_running(tmp_path)
    assert read_status(tmp_path).state == "running"  # this very process
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import pathlib, astuner.run_status as s; s.mark_running(pathlib.Path({str(tmp_path)!r}))",
        ],
        check=True,
    )
    assert child.returncode == 0
    status = read_status(tmp_path)
    assert status.state == "killed" and "without saying so" in status.reason
    data = json.loads((tmp_path / "status.json").read_text())
    data.update(pid=os.getpid(), process_start="1")  # our PID, but a process that started at another time
    (tmp_path / "status.json").write_text(json.dumps(data))
    assert read_status(tmp_path).state == "killed"
    (tmp_path / "status.json").write_text("{not json")
    assert read_status(tmp_path).state == "unknown"


def test_a_hanging_or_broken_notifier_never_holds_up_or_fails_the_run(
    app, write_config, workdir, monkeypatch, capsys
) -> None:
    import astuner.notify

    monkeypatch.setattr(astuner.notify, "NOTIFIER_WAIT_S", 0.3)
    began = time.monotonic()
    result = run_ending(app, write_config({"notify": {"hears": {"behaviour": "hang"}}}, name="hang.yaml"))
    assert result.exit_code == 0 and time.monotonic() - began < 4
    assert read_status(only_run(workdir, "hang")).state == "finished"
    result = run_ending(app, write_config({"notify": {"hears": {"behaviour": "break"}}}, name="broken.yaml"))
    assert result.exit_code == 0
    log = (only_run(workdir, "broken") / "astuner.log").read_text()
    assert "notifier failed" in log and "no route to the pager" in log


def test_the_seeds_sms_switch_without_astuner_notify_says_what_to_install_and_the_run_goes_on(
    app, write_config, workdir, monkeypatch
) -> None:
    monkeypatch.setenv("PHONE_NUMBERS", "+15550001")
    result = run_ending(app, write_config({"notify": {"hears": {}}}, name="nosms.yaml"))
    assert result.exit_code == 0 and Hears.told[-1].status == "finished"
    log = (only_run(workdir, "nosms") / "astuner.log").read_text()
    warnings = [json.loads(line)["event"] for line in log.splitlines() if '"level": "warning"' in line]
    (warning,) = [w for w in warnings if "PHONE_NUMBERS" in w]
    assert "notifier 'sms'" in warning and "`pip install astuner-notify`" in warning


def test_config_and_plugin_errors_come_before_any_run_folder(app, write_config, workdir) -> None:
    result = run_ending(app, write_config({"notify": {"hear": {}}}, name="typo.yaml"))
    assert result.exit_code == 1 and "Did you mean 'notify.hears'" in result.stderr
    result = run_ending(app, write_config({"notify": {"webhook": {"url": "x"}}}, name="nonotify.yaml"))
    assert result.exit_code == 1 and "'notify.webhook'" in result.stderr
    assert "`pip install astuner-notify`" in result.stderr and "./plugins/notify" in result.stderr
    result = CliRunner().invoke(
        app, ["run", "--conf", str(write_config({}, name="nob.yaml")), "--backbone", "nope"]
    )
    assert result.exit_code == 1
    assert not (workdir / "launcher_record").exists()


def test_version_and_help_without_type_placeholders(app) -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.startswith("astuner ")
    for command in (["run"], ["plugins", "list"], ["config", "show"]):
        shown = CliRunner().invoke(app, [*command, "--help"]).stdout
        assert "Usage:" in shown and "<bool>" not in shown, command


def test_end_run_marks_how_a_run_ended(tmp_path: Path) -> None:
    mark_running(tmp_path)
    assert read_status(tmp_path).state == "running"
    end_run(tmp_path, None)
    assert read_status(tmp_path).state == "finished"
    mark_running(tmp_path)
    end_run(tmp_path, ValueError("bad split\nmore"))
    assert str(read_status(tmp_path)) == "failed: ValueError: bad split"


def test_once_a_run_ended_nothing_more_is_written_to_its_log(app, write_config, workdir) -> None:
    result = run_ending(app, write_config({}, name="quiet.yaml"))
    assert result.exit_code == 0, result.output
    log_file = only_run(workdir, "quiet") / "astuner.log"
    assert "run finished" in log_file.read_text()
    size = log_file.stat().st_size
    get_logger().info("the process goes on after the run")  # a notebook's next cell; the next test
    assert log_file.stat().st_size == size
    assert not [h for h in logging.getLogger("astuner").handlers if isinstance(h, logging.FileHandler)]


def test_a_plugin_command_opens_its_run_through_runs_and_it_ends_as_astuner_run_does(
    plugins: Plugins, write_config, workdir
) -> None:
    seen = []

    def register_notifiers(register):
        register("hears", Hears, settings=HearsSettings)

    def register_commands(cli, runs):
        @cli.command("count")
        def count(conf: Path, fail: bool = False) -> None:
            seen.append(runs.plugins)
            with runs.open(load_config(conf), command="count") as run:
                append_rows(run.experiment.metrics_file, [{"step": 1, "counted": 3.0}])
                run.next_steps.append("  again:       astuner count CONF")
                if fail:
                    raise AstunerError("nothing left to count")

    hooks = {"register_notifiers": register_notifiers, "register_commands": register_commands}
    plugins.add(SimpleNamespace(**{name: hookimpl(f) for name, f in hooks.items()}), name="counter")
    Hears.told = []
    app = make_app(plugins)
    conf = write_config({"experiment_name": "counted", "notify": {"hears": {}}}, name="count.yaml")
    result = CliRunner().invoke(app, ["count", str(conf)])
    assert result.exit_code == 0, result.output
    assert seen == [plugins]  # the CLI's own plugins, not a second manager
    folder = only_run(workdir, "counted")
    status = read_status(folder)
    assert (status.state, status.command, status.pid) == ("finished", "count", os.getpid())
    (summary,) = [s for s in Hears.told if s.name == "counted"]  # (an earlier test's hung notifier may add)
    assert (summary.command, summary.backbone, summary.steps) == ("count", "debug", 1)
    assert yaml.safe_load((folder / "config.yaml").read_text())["astuner"]["backbone"] == "debug"
    closing = result.stdout.strip().splitlines()[-3:]
    assert closing[0].startswith("count finished after ") and closing[0].endswith(f"1 steps: {folder}")
    assert closing[1:] == [
        f"  look:        astuner logview {folder}  (needs astuner-logview)",
        "  again:       astuner count CONF",
    ]
    events = [json.loads(line)["event"] for line in (folder / "astuner.log").read_text().splitlines()]
    assert events[0] == "count started" and "count finished" in events
    assert not [h for h in logging.getLogger("astuner").handlers if isinstance(h, logging.FileHandler)]

    failing = write_config({"experiment_name": "miscounted"}, name="fail.yaml")
    result = CliRunner().invoke(app, ["count", str(failing), "--fail"])
    assert result.exit_code != 0
    folder = only_run(workdir, "miscounted")
    assert str(read_status(folder)) == "failed: nothing left to count"
    assert read_status(folder).command == "count"
    assert "count failed (nothing left to count) after " in result.stdout
    assert f"  why:         the end of {folder}/astuner.log" in result.stdout


class SickBackbone:
    """Fourteen steps whose task groups carry no learning signal at steps 5, 6, 7 and 12."""

    def run(self, ctx) -> None:
        rows = [{"step": 0, "val/reward_mean": 0.5}]  # validation before training: not a step
        for step in range(1, 15):
            frac = 0.9 if step in (5, 6, 7, 12) else 0.1
            rows.append({"step": step, "train/reward_mean": 0.5, "train/zero_adv_group_frac": frac})
        append_rows(ctx.experiment.metrics_file, rows)


def test_the_closing_lines_say_on_how_many_steps_each_health_check_fired(
    plugins: Plugins, write_config, workdir
) -> None:
    def register_backbones(register):
        register("sick", SickBackbone)

    plugins.add(SimpleNamespace(register_backbones=hookimpl(register_backbones)), name="sick")
    conf = write_config({}, name="sick.yaml")
    result = CliRunner().invoke(make_app(plugins), ["run", "--conf", str(conf), "--backbone", "sick"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == "  health:      zero_advantage_groups on 4 of 14 steps"
    acknowledged = ["-o", "health.acknowledged=[zero_advantage_groups]"]
    result = CliRunner().invoke(
        make_app(plugins), ["run", "--conf", str(conf), "--backbone", "sick", *acknowledged]
    )
    assert result.exit_code == 0, result.output
    last = result.stdout.strip().splitlines()[-1]
    assert last == "  health:      zero_advantage_groups on 4 of 14 steps (acknowledged in the config)"
