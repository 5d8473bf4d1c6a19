"""Telling someone that a run ended: a summary of it, and the dispatch to the notifiers.

When a run ends (finished, failed or interrupted), `notify_run_end` hands
its `RunSummary` to every notifier the config names under `notify:` (and to
those the seeds' environment turns on, `compat.switched_on_notifiers`).
Each runs in a thread of its own with a time limit: one that fails or hangs
is logged and left behind, and never fails or holds up the run. Notifiers
come from plugins (`register_notifiers`); astuner-notify provides `webhook`,
`command` and `sms`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from astuner.compat import switched_on_notifiers
from astuner.logs import get_logger
from astuner.record import ExperimentDir, read_metrics
from astuner.run_status import RunStatus

if TYPE_CHECKING:
    from astuner.plugins import Plugins

# Longest a notifier may take before the run stops waiting for it.
NOTIFIER_WAIT_S = 30.0


@dataclass(frozen=True)
class RunSummary:
    """What a notifier is told: how the run ended and what it produced.

    `command` is the one that ran it (`run`, `eval`, `sft`, a plugin's);
    `backbone` is the config's, whichever command ran.
    """

    experiment: str
    name: str
    backbone: str
    status: str
    reason: str
    started: str
    ended: str
    duration_s: float
    steps: int
    last_metrics: dict[str, float] = field(default_factory=dict)
    checkpoint: str | None = None
    command: str = "run"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        """One line, for a text message."""
        minutes = self.duration_s / 60
        why = f" ({self.reason})" if self.reason else ""
        done = f"{self.status}{why} after {minutes:.1f} min, {self.steps} steps"
        return f"astuner {self.command} {self.name} {done}."


class Notifier(Protocol):
    """Told once, when a run ends, how it ended and what it produced.

    ```python
    from astuner.api import Notifier, RunSummary


    class Printed:
        def notify(self, summary: RunSummary) -> None:
            print(summary.text())  # "astuner run math finished after 12.5 min, 40 steps."


    notifier: Notifier = Printed()
    ```
    """

    def notify(self, summary: RunSummary) -> None: ...


def summarize(
    name: str,
    backbone: str,
    experiment: ExperimentDir,
    status: RunStatus,
    checkpoint: Path | None = None,
    command: str = "run",
) -> RunSummary:
    """The summary of the run in `experiment` that `command` ran, ended with `status` (absolute paths).

    `name` is the run's `experiment_name`, `backbone` the config's `backbone`.

    `checkpoint` is the newest the run wrote (for `astuner run`, as its backbone found it:
    `astuner.checkpoint_model.checkpoint_of`).
    """
    steps, last = _metrics(experiment)
    started = status.started or _now()
    ended = status.ended or _now()
    return RunSummary(
        experiment=str(experiment.path.resolve()),
        name=name,
        backbone=backbone,
        status=status.state,
        reason=status.reason,
        started=started,
        ended=ended,
        duration_s=(datetime.fromisoformat(ended) - datetime.fromisoformat(started)).total_seconds(),
        steps=steps,
        last_metrics=last,
        checkpoint=str(checkpoint.resolve()) if checkpoint is not None else None,
        command=command,
    )


def enabled_notifiers(notify: Mapping[str, Any], plugins: Plugins) -> list[str]:
    """The notifiers this run tells: those with a block in `notify` (the config's `notify:`), and those
    the seeds switch on."""
    return [*notify, *switched_on_notifiers(notify, plugins)]


def notify_run_end(names: Iterable[str], build: Callable[[str], Notifier], summary: RunSummary) -> None:
    """Hand `summary` to each notifier of `names` (`enabled_notifiers`), each in its own thread, waiting
    at most NOTIFIER_WAIT_S.

    `build` makes the notifier of a name (the launch path's `astuner.components.build`, bound to the
    run); one it cannot make is skipped, as the run's start has already said.
    """
    log = get_logger()
    threads = []
    for name in names:
        try:
            notifier = build(name)
        except Exception as exc:  # said once when the run started (RunLifecycle.open); never costs its ending
            log.debug("notifier not run", notifier=name, error=str(exc))
            continue
        thread = threading.Thread(
            target=_notify_one, args=(name, notifier, summary), name=f"astuner-notify-{name}", daemon=True
        )
        thread.start()
        threads.append((name, thread))
    for name, thread in threads:
        thread.join(NOTIFIER_WAIT_S)
        if thread.is_alive():
            log.warning("notifier still busy: left behind", notifier=name, waited_s=NOTIFIER_WAIT_S)


def _notify_one(name: str, notifier: Notifier, summary: RunSummary) -> None:
    try:
        notifier.notify(summary)
    except Exception as exc:
        get_logger().warning("notifier failed", notifier=name, error=f"{type(exc).__name__}: {exc}")
    else:
        get_logger().info("notified", notifier=name, status=summary.status)


def _metrics(experiment: ExperimentDir) -> tuple[int, dict[str, float]]:
    """Steps logged, and the last step's scalar metrics."""
    steps = [
        r for r in read_metrics(experiment.metrics_file) if isinstance(r.get("step"), int) and r["step"] > 0
    ]
    if not steps:
        return 0, {}
    last = {k: v for k, v in steps[-1].items() if isinstance(v, int | float) and k != "step"}
    return steps[-1]["step"], last


def _now() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")
