"""astuner-notify: notifiers `webhook`, `command` and `sms`, told once when a run ends."""
