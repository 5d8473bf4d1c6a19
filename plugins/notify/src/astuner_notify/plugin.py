"""Entry point of `astuner-notify`: notifiers `webhook`, `command` and `sms`."""

from __future__ import annotations

from astuner.api import Register, hookimpl
from astuner_notify.notifiers import (
    CommandNotifier,
    CommandSettings,
    SmsNotifier,
    SmsSettings,
    WebhookNotifier,
    WebhookSettings,
)


@hookimpl
def register_notifiers(register: Register) -> None:
    register("webhook", WebhookNotifier, settings=WebhookSettings, summary="POST the run summary as JSON")
    register("command", CommandNotifier, settings=CommandSettings, summary="Run a command, summary on stdin")
    register(
        "sms",
        SmsNotifier,
        settings=SmsSettings,
        summary="Text PHONE_NUMBERS through Twilio",
        switched_on_by=("PHONE_NUMBERS",),
    )
