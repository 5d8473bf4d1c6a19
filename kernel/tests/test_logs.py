"""warn_once: a condition every rollout may meet is one line in the log, per key and process."""

from __future__ import annotations

import threading

from structlog.testing import capture_logs

from astuner.logs import forget_warnings, get_logger, warn_once


def test_each_key_is_warned_about_once_with_its_first_fields() -> None:
    get_logger()  # its first use configures structlog, which would drop the capture's processors
    with capture_logs() as logs:
        said = [warn_once("untrained", f"{count} calls left out", task="t") for count in (1, 2)]
        said.append(warn_once("other", "another condition"))
    assert said == [True, False, True]
    assert [(log["event"], log["log_level"]) for log in logs] == [
        ("1 calls left out", "warning"),
        ("another condition", "warning"),
    ]
    assert logs[0]["task"] == "t"


def test_threads_meeting_one_key_at_once_log_it_once() -> None:
    get_logger()
    start = threading.Barrier(8)

    def meet() -> None:
        start.wait()
        warn_once("shared", "met by every thread")

    with capture_logs() as logs:
        threads = [threading.Thread(target=meet) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert [log["event"] for log in logs] == ["met by every thread"]


def test_forgotten_warnings_are_said_again() -> None:
    get_logger()
    with capture_logs() as logs:
        warn_once("again", "said")
        forget_warnings()
        warn_once("again", "said")
    assert len(logs) == 2
