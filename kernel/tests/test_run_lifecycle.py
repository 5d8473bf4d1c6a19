"""A run's life: status.json start to end, notifiers told once, closing lines, errors before the folder."""

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from astuner import hookimpl
from astuner.cli import make_app
from astuner.plugins import Plugins
from astuner.protocols import RunContext
from astuner.run_status import mark_running, read_status


class EndSettings(BaseModel):
    outcome: str = "finish"  # finish | fail | interrupt


class EndingBackbone:
    """Logs two steps and a checkpoint, then ends as told."""

    def __init__(self, settings: EndSettings) -> None:
        self.settings = settings

    def run(self, ctx: RunContext) -> None:
        folder = ctx.experiment.path
        assert read_status(folder).state == "running"
        lines = [json.dumps({"step": s, "train/reward_mean": s / 4}) for s in (1, 2)]
        ctx.experiment.metrics_file.write_text("\n".join(lines) + "\n")
        (ctx.experiment.checkpoints / "step_2").mkdir(parents=True)
        if self.settings.outcome == "fail":
            raise RuntimeError("the judge fell over\nsecond line")
        if self.settings.outcome == "interrupt":
            raise KeyboardInterrupt

    def latest_checkpoint(self, runs: Iterable[Path]) -> Path | None:
        """The `checkpoints/step_2` it made: how the kernel learns of a backbone's checkpoints."""
        found = [run / "checkpoints" / "step_2" for run in runs if (run / "checkpoints" / "step_2").is_dir()]
        return found[-1] if found else None


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


class Hook(BaseHTTPRequestHandler):
    received: ClassVar[list] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Hook.received.append((self.path, self.headers.get("Content-Type"), body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def webhook():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Hook.received = []
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def run(app, conf: Path, *args: str):
    return CliRunner().invoke(app, ["run", "--conf", str(conf), "--backbone", "ending", *args])


def only_run(workdir: Path, name: str) -> Path:
    (folder,) = (workdir / "launcher_record" / name).iterdir()
    return folder


def test_a_finished_run_says_so_tells_its_notifiers_and_what_to_do_next(app, write_config, workdir) -> None:
    conf = write_config({"notify": {"hears": {}}}, name="done.yaml")
    result = run(app, conf)
    assert result.exit_code == 0, result.output
    folder = only_run(workdir, "done")
    status = read_status(folder)
    assert status.state == "finished" and status.pid == os.getpid() and status.ended
    (summary,) = Hears.told
    assert (summary.status, summary.steps, summary.name) == ("finished", 2, "done")
    assert summary.last_metrics == {"train/reward_mean": 0.5}
    assert summary.checkpoint == str(folder / "checkpoints" / "step_2")
    closing = result.stdout.strip().splitlines()[-5:]
    assert closing[0].startswith("run finished after ") and closing[0].endswith(f"2 steps: {folder}")
    assert closing[1:] == [
        f"  records:     {folder}/rollouts/",
        f"  checkpoint:  {folder}/checkpoints/step_2",
        f"  look:        astuner logview {folder}",
        f"  evaluate:    astuner eval --conf {folder}/config.yaml --checkpoint {folder}/checkpoints/step_2",
    ]


def test_a_failed_and_a_killed_run_say_why(app, write_config, workdir) -> None:
    result = run(app, write_config({"ending": {"outcome": "fail"}, "notify": {"hears": {}}}, name="bad.yaml"))
    assert result.exit_code == 1
    status = read_status(only_run(workdir, "bad"))
    assert str(status) == "failed: RuntimeError: the judge fell over"
    assert Hears.told[-1].status == "failed" and Hears.told[-1].reason == status.reason
    assert "run failed (RuntimeError: the judge fell over)" in result.stdout
    assert "  why:         the end of" in result.stdout

    result = run(app, write_config({"ending": {"outcome": "interrupt"}}, name="stopped.yaml"))
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


def test_the_webhook_receives_the_summary_of_a_finished_and_of_a_failed_run(
    app, write_config, workdir, webhook: str
) -> None:
    hook = {"webhook": {"url": f"{webhook}/astuner", "headers": {"X-Token": "t"}}}
    assert run(app, write_config({"notify": hook}, name="ok.yaml")).exit_code == 0
    assert (
        run(app, write_config({"notify": hook, "ending": {"outcome": "fail"}}, name="no.yaml")).exit_code == 1
    )
    assert [(path, kind) for path, kind, _ in Hook.received] == [("/astuner", "application/json")] * 2
    finished, failed = (json.loads(body) for _, _, body in Hook.received)
    assert (finished["name"], finished["status"], finished["steps"]) == ("ok", "finished", 2)
    assert finished["checkpoint"].endswith("checkpoints/step_2")
    assert (failed["name"], failed["status"]) == ("no", "failed")
    assert failed["reason"] == "RuntimeError: the judge fell over"


def test_the_command_notifier_gets_the_summary_on_stdin(app, write_config, workdir) -> None:
    out = workdir / "told.json"
    script = f"import sys, pathlib; pathlib.Path({str(out)!r}).write_text(sys.stdin.read())"
    conf = write_config({"notify": {"command": {"command": [sys.executable, "-c", script]}}}, name="cmd.yaml")
    assert run(app, conf).exit_code == 0
    assert json.loads(out.read_text())["status"] == "finished"


def test_a_hanging_or_broken_notifier_never_holds_up_or_fails_the_run(
    app, write_config, workdir, monkeypatch, capsys
) -> None:
    import astuner.notify

    monkeypatch.setattr(astuner.notify, "NOTIFIER_WAIT_S", 0.3)
    began = time.monotonic()
    result = run(app, write_config({"notify": {"hears": {"behaviour": "hang"}}}, name="hang.yaml"))
    assert result.exit_code == 0 and time.monotonic() - began < 4
    assert read_status(only_run(workdir, "hang")).state == "finished"
    result = run(app, write_config({"notify": {"hears": {"behaviour": "break"}}}, name="broken.yaml"))
    assert result.exit_code == 0
    log = (only_run(workdir, "broken") / "astuner.log").read_text()
    assert "notifier failed" in log and "no route to the pager" in log


def test_sms_without_a_provider_says_what_is_missing_and_the_run_goes_on(
    app, write_config, workdir, monkeypatch, webhook: str
) -> None:
    monkeypatch.setenv("PHONE_NUMBERS", "+15550001,+15550002")
    for name in ("TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN", "TWILIO_FROM_NUMBER"):
        monkeypatch.delenv(name, raising=False)
    result = run(app, write_config({}, name="sms.yaml"))
    assert result.exit_code == 0
    log = (only_run(workdir, "sms") / "astuner.log").read_text()
    warnings = [json.loads(line) for line in log.splitlines() if '"level": "warning"' in line]
    (warning,) = [w for w in warnings if "No text message" in w["event"]]  # said once, at the start
    assert "needs notify.sms.account_sid (or TWILIO_ACCOUNT_SID), notify.sms.auth_token" in warning["event"]
    assert "notify.sms.numbers" not in warning["event"]  # PHONE_NUMBERS gave them

    monkeypatch.setenv("TWILIO_ACCOUNT_SID", "AC1")
    monkeypatch.setenv("TWILIO_AUTH_TOKEN", "secret")
    monkeypatch.setenv("TWILIO_FROM_NUMBER", "+15559999")
    assert run(app, write_config({"notify": {"sms": {"api_url": webhook}}}, name="sms2.yaml")).exit_code == 0
    assert [path for path, _, _ in Hook.received] == ["/2010-04-01/Accounts/AC1/Messages.json"] * 2
    assert b"To=%2B15550001" in Hook.received[0][2] and b"run+sms2+finished" in Hook.received[0][2]


def test_config_and_plugin_errors_come_before_any_run_folder(app, write_config, workdir) -> None:
    result = run(app, write_config({"notify": {"webhook": {}}}, name="nourl.yaml"))
    assert result.exit_code == 1 and "notify.webhook" in result.stderr and "url" in result.stderr
    result = run(app, write_config({"notify": {"webhok": {"url": "x"}}}, name="typo.yaml"))
    assert result.exit_code == 1 and "Did you mean 'notify.webhook'" in result.stderr
    result = CliRunner().invoke(
        app, ["run", "--conf", str(write_config({}, name="nob.yaml")), "--backbone", "nope"]
    )
    assert result.exit_code == 1
    assert not (workdir / "launcher_record").exists()


def test_version_and_help_without_type_placeholders(app) -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.startswith("astuner ")
    for command in (["run"], ["plugins", "list"], ["config", "show"], ["eval"]):
        shown = CliRunner().invoke(app, [*command, "--help"]).stdout
        assert "Usage:" in shown and "<bool>" not in shown, command


def test_tracking_marks_how_a_block_ended(tmp_path: Path) -> None:
    from astuner.run_status import tracking

    with tracking(tmp_path):
        assert read_status(tmp_path).state == "running"
    assert read_status(tmp_path).state == "finished"
    with pytest.raises(ValueError), tracking(tmp_path):
        raise ValueError("bad split\nmore")
    assert str(read_status(tmp_path)) == "failed: ValueError: bad split"
