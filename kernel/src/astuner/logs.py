"""Logging: readable lines on the terminal, JSON lines in the experiment folder.

Everything goes through the stdlib logger "astuner" via structlog, so
library code calls `get_logger().info("event", key=value)` and the CLI
decides where it ends up.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from pathlib import Path
from typing import Any

import structlog

from astuner.finite_json import finite

LOGGER_NAME = "astuner"
_SHARED_PROCESSORS: list[Any] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.processors.TimeStamper(fmt="iso"),
]
_configured = False


def configure_logging(*, verbose: bool = False, log_file: Path | None = None) -> None:
    """(Re)configure handlers: terminal on stderr, plus JSON lines into `log_file`."""
    global _configured
    structlog.configure(
        processors=[*_SHARED_PROCESSORS, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    logger = logging.getLogger(LOGGER_NAME)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    console = _StderrHandler()
    console.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processor=structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()),
            foreign_pre_chain=_SHARED_PROCESSORS,
        )
    )
    console.setLevel(logging.DEBUG if verbose else logging.INFO)
    logger.addHandler(console)
    if log_file is not None:
        logger.addHandler(_json_file_handler(log_file))
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    _configured = True


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is now: a stream captured when logging was set up
    (a test runner, an embedding app) may be closed by the time a later line is logged."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:  # StreamHandler.__init__ assigns it; the property wins
        pass


def close_log_file() -> None:
    """Stop writing JSON lines to a file; the terminal keeps its lines.

    Called when a run ends, so that what the process logs afterwards (a
    notebook's next cell, the next test) never lands in that run's folder,
    which may be gone by then.
    """
    stdlib = logging.getLogger(LOGGER_NAME)
    for handler in [h for h in stdlib.handlers if isinstance(h, logging.FileHandler)]:
        stdlib.removeHandler(handler)
        handler.close()


class _RunLogFile(logging.FileHandler):
    """The run's JSON log file, where a write that fails (a full disk) is said once, in one line.

    The stdlib handler prints a traceback for every line it cannot write,
    burying the run's own error (often the records writer's, naming the file
    that filled the disk), and its close raises, replacing that error. From
    the first failure on, the lines go to the terminal only.
    """

    failed = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.failed:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        problem = sys.exc_info()[1]
        if self.failed or not isinstance(problem, OSError):
            super().handleError(record)
            return
        self.failed = True
        print(
            f"astuner: cannot write the log file '{self.baseFilename}': {problem.strerror or problem}; "
            "from here on the log goes to the terminal only.",
            file=sys.stderr,
            flush=True,
        )

    def close(self) -> None:
        try:
            super().close()
        except OSError:  # what it could not flush is lost, and was said when the write failed
            self.failed = True


def _json_line(data: Any, **kwargs: Any) -> str:
    """A log line as strict JSON: a NaN or infinite value (a metric that overflowed) as null."""
    return json.dumps(finite(data), allow_nan=False, **kwargs)


def _json_file_handler(log_file: Path) -> logging.Handler:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    handler = _RunLogFile(log_file, encoding="utf-8")
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processor=structlog.processors.JSONRenderer(serializer=_json_line),
            foreign_pre_chain=_SHARED_PROCESSORS,
        )
    )
    handler.setLevel(logging.DEBUG)
    return handler


def get_logger(**context: Any) -> structlog.stdlib.BoundLogger:
    """The astuner logger, configured for the terminal on first use.

    `context` is bound to every line it logs:

    ```python
    from astuner.api import get_logger

    log = get_logger(plugin="my_judge")
    log.info("judged", task_id=task.task_id, reward=reward)
    ```
    """
    if not _configured:
        configure_logging()
    return structlog.stdlib.get_logger(LOGGER_NAME).bind(**context)


_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(key: str, event: str, **fields: Any) -> bool:
    """Log the warning `event` the first time this process is given `key`; whether it was logged now.

    For a condition a run meets over and over (every rollout, every tool
    call, every load of its config): it is one fact about the run, so one
    line says it. Threads share the memory (Trinity runs episodes on several).

    ```python
    from astuner.api import warn_once

    if not output.response_text:
        warn_once("my_judge:no-response", "my_judge: a workflow returned no response; it scores 0")
    ```
    """
    with _warned_lock:
        if key in _warned:
            return False
        _warned.add(key)
    get_logger().warning(event, **fields)
    return True


def forget_warnings() -> None:
    """Warn again about every key (`astuner.testing` does this before each test)."""
    with _warned_lock:
        _warned.clear()
