"""Notifiers `webhook`, `command` and `sms`, each told through a whole `astuner run` when it ends."""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from astuner.testing.backbones import only_run, run_ending


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
    """A local HTTP server that records every POST: the webhook's target, or Twilio's API."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Hook.received = []
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_the_webhook_receives_the_summary_of_a_finished_and_of_a_failed_run(
    app, write_config, workdir, webhook: str
) -> None:
    hook = {"webhook": {"url": f"{webhook}/astuner", "headers": {"X-Token": "t"}}}
    assert run_ending(app, write_config({"notify": hook}, name="ok.yaml")).exit_code == 0
    failing = write_config({"notify": hook, "ending": {"outcome": "fail"}}, name="no.yaml")
    assert run_ending(app, failing).exit_code == 1
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
    assert run_ending(app, conf).exit_code == 0
    assert json.loads(out.read_text())["status"] == "finished"


def test_sms_without_a_provider_says_what_is_missing_and_the_run_goes_on(
    app, write_config, workdir, monkeypatch, webhook: str
) -> None:
    monkeypatch.setenv("PHONE_NUMBERS", "+15550001,+15550002")
    for name in ("TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN", "TWILIO_FROM_NUMBER"):
        monkeypatch.delenv(name, raising=False)
    result = run_ending(app, write_config({}, name="sms.yaml"))
    assert result.exit_code == 0
    log = (only_run(workdir, "sms") / "astuner.log").read_text()
    warnings = [json.loads(line) for line in log.splitlines() if '"level": "warning"' in line]
    (warning,) = [w for w in warnings if "No text message" in w["event"]]  # said once, at the start
    assert "needs notify.sms.account_sid (or TWILIO_ACCOUNT_SID), notify.sms.auth_token" in warning["event"]
    assert "notify.sms.numbers" not in warning["event"]  # PHONE_NUMBERS gave them

    monkeypatch.setenv("TWILIO_ACCOUNT_SID", "AC1")
    monkeypatch.setenv("TWILIO_AUTH_TOKEN", "secret")
    monkeypatch.setenv("TWILIO_FROM_NUMBER", "+15559999")
    assert (
        run_ending(app, write_config({"notify": {"sms": {"api_url": webhook}}}, name="sms2.yaml")).exit_code
        == 0
    )
    assert [path for path, _, _ in Hook.received] == ["/2010-04-01/Accounts/AC1/Messages.json"] * 2
    assert b"To=%2B15550001" in Hook.received[0][2] and b"run+sms2+finished" in Hook.received[0][2]


def test_a_notifier_block_with_a_bad_or_misspelled_setting_stops_the_run_before_its_folder(
    app, write_config, workdir: Path
) -> None:
    result = run_ending(app, write_config({"notify": {"webhook": {}}}, name="nourl.yaml"))
    assert result.exit_code == 1 and "notify.webhook" in result.stderr and "url" in result.stderr
    result = run_ending(app, write_config({"notify": {"webhok": {"url": "x"}}}, name="typo.yaml"))
    assert result.exit_code == 1 and "Did you mean 'notify.webhook'" in result.stderr
    assert not (workdir / "launcher_record").exists()
