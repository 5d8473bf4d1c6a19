"""Warnings that are worth saying once per process, not once per tool call.

A training run calls the tool thousands of times; a missing sandbox or a
weaker confinement is one fact about the run, so it is logged once (on the
astuner logger, so it also lands in the experiment's log file).
"""

from __future__ import annotations

from typing import Any

from astuner.api import get_logger

_seen: set[str] = set()


def warn_once(key: str, message: str, **fields: Any) -> bool:
    """Log `message` as a warning unless `key` was warned about already; whether it was logged now."""
    if key in _seen:
        return False
    _seen.add(key)
    get_logger().warning(message, **fields)
    return True


def forget() -> None:
    """Warn again about everything (tests)."""
    _seen.clear()
