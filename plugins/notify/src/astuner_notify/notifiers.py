"""Notifiers `webhook`, `command` and `sms`: told once, with the run's `RunSummary`, when a run ends.

    notify:
      webhook: {url: https://hooks.example.com/astuner}    # POST the summary as JSON
      command: {command: "python tell_me.py"}               # the summary as JSON on stdin

`sms` sends the one-line summary to the numbers of the seeds' `PHONE_NUMBERS`
through Twilio's REST API; it needs an account (`notify.sms.account_sid`,
`auth_token`, `from_number`, or `TWILIO_ACCOUNT_SID`, `TWILIO_AUTH_TOKEN`,
`TWILIO_FROM_NUMBER`) and names whatever is missing instead of sending.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import shlex
import signal
import subprocess
import urllib.parse
import urllib.request

from pydantic import BaseModel, ConfigDict, Field

from astuner.api import ConfigError, RunSummary


class WebhookSettings(BaseModel):
    """`notify.webhook`."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="Where to POST the run summary (JSON).")
    headers: dict[str, str] = Field(default_factory=dict, description="Extra HTTP headers (e.g. a token).")
    timeout_s: float = Field(10.0, gt=0, description="Give up on the request after this long.")


class WebhookNotifier:
    def __init__(self, settings: WebhookSettings) -> None:
        self.settings = settings

    def notify(self, summary: RunSummary) -> None:
        request = urllib.request.Request(
            self.settings.url,
            data=json.dumps(summary.as_dict()).encode("utf-8"),
            headers={"Content-Type": "application/json", **self.settings.headers},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=self.settings.timeout_s) as response:
            response.read()


class CommandSettings(BaseModel):
    """`notify.command`."""

    model_config = ConfigDict(extra="forbid")

    command: str | list[str] = Field(
        description="The command to run (no shell; a string is split like a shell would), with the run "
        "summary as JSON on its stdin."
    )
    timeout_s: float = Field(60.0, gt=0, description="Stop the command after this long.")


class CommandNotifier:
    def __init__(self, settings: CommandSettings) -> None:
        self.settings = settings

    def notify(self, summary: RunSummary) -> None:
        command = self.settings.command
        argv = shlex.split(command) if isinstance(command, str) else list(command)
        # A session of its own makes the command lead a process group that holds everything it
        # starts, so stopping it stops its children too instead of leaving them to PID 1.
        with subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        ) as process:
            _running.add(process.pid)
            try:
                out, err = process.communicate(json.dumps(summary.as_dict()), timeout=self.settings.timeout_s)
            except subprocess.TimeoutExpired:
                _stop_group(process.pid)
                # Not communicate(): a process that left the group could still hold the pipes open.
                process.wait()
                raise RuntimeError(
                    f"{argv[0]} still ran after notify.command.timeout_s ({self.settings.timeout_s:g} s): "
                    "stopped it and every process it started"
                ) from None
            finally:
                _running.discard(process.pid)
        if process.returncode:
            tail = (err or out).strip()[-400:]
            raise RuntimeError(f"{argv[0]} exited with {process.returncode}: {tail}")


# Process groups of commands still running. The kernel waits for notifiers a while and then leaves
# them behind in daemon threads; when the interpreter exits those threads just stop, so the
# commands they started are stopped here instead of living on under PID 1.
_running: set[int] = set()


def _stop_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group has already exited
        os.killpg(pgid, signal.SIGKILL)


@atexit.register
def _stop_running_commands() -> None:
    for pgid in list(_running):
        _stop_group(pgid)


class SmsSettings(BaseModel):
    """`notify.sms` (Twilio); every field may come from the environment instead."""

    model_config = ConfigDict(extra="forbid")

    numbers: list[str] = Field(
        default_factory=list, description="Phone numbers to text (default: PHONE_NUMBERS, comma-separated)."
    )
    account_sid: str = Field("", description="Twilio account SID (or TWILIO_ACCOUNT_SID).")
    auth_token: str = Field("", description="Twilio auth token (or TWILIO_AUTH_TOKEN).")
    from_number: str = Field("", description="The sending number (or TWILIO_FROM_NUMBER).")
    api_url: str = Field("https://api.twilio.com", description="Twilio's API root.")
    timeout_s: float = Field(10.0, gt=0, description="Give up on each request after this long.")


class SmsNotifier:
    def __init__(self, settings: SmsSettings) -> None:
        s = settings
        numbers = s.numbers or [
            n.strip() for n in os.environ.get("PHONE_NUMBERS", "").replace(";", ",").split(",") if n.strip()
        ]
        self.numbers = numbers
        self.account_sid = s.account_sid or os.environ.get("TWILIO_ACCOUNT_SID", "")
        self.auth_token = s.auth_token or os.environ.get("TWILIO_AUTH_TOKEN", "")
        self.from_number = s.from_number or os.environ.get("TWILIO_FROM_NUMBER", "")
        self.settings = s
        missing = [
            f"notify.sms.{key} (or {env})"
            for key, env, value in (
                ("numbers", "PHONE_NUMBERS", numbers),
                ("account_sid", "TWILIO_ACCOUNT_SID", self.account_sid),
                ("auth_token", "TWILIO_AUTH_TOKEN", self.auth_token),
                ("from_number", "TWILIO_FROM_NUMBER", self.from_number),
            )
            if not value
        ]
        if missing:
            raise ConfigError(
                "No text message will be sent when the run ends: the SMS notifier (PHONE_NUMBERS) sends "
                f"through Twilio and needs {', '.join(missing)}. The run itself is not affected."
            )

    def notify(self, summary: RunSummary) -> None:
        url = f"{self.settings.api_url.rstrip('/')}/2010-04-01/Accounts/{self.account_sid}/Messages.json"
        credentials = base64.b64encode(f"{self.account_sid}:{self.auth_token}".encode()).decode()
        for number in self.numbers:
            form = {"To": number, "From": self.from_number, "Body": summary.text()}
            request = urllib.request.Request(
                url,
                data=urllib.parse.urlencode(form).encode(),
                headers={"Authorization": f"Basic {credentials}"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=self.settings.timeout_s) as response:
                response.read()
