"""A backbone that ends as told, for tests of a run's life: its status, closing lines and notifiers.

Register `EndingBackbone` (settings `EndSettings`) under the name `ending`
on a test's plugin manager, then `run_ending(app, conf)` runs it through the
CLI's `astuner run`; `only_run` finds the one run folder it made.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from typer.testing import CliRunner, Result

from astuner.protocols import RunContext
from astuner.run_status import read_status


class EndSettings(BaseModel):
    """`ending:`: how the run ends."""

    outcome: str = "finish"  # finish | fail | interrupt


class EndingBackbone:
    """Logs two steps (`train/reward_mean` 0.25, 0.5) and a checkpoint `step_2`, then ends as told."""

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


def run_ending(app: Any, conf: Path, *args: str) -> Result:
    """`astuner run --conf conf --backbone ending ...` through `app` (from `make_app`)."""
    return CliRunner().invoke(app, ["run", "--conf", str(conf), "--backbone", "ending", *args])


def only_run(workdir: Path, name: str) -> Path:
    """The one run folder of experiment `name` under `workdir/launcher_record`."""
    (folder,) = (workdir / "launcher_record" / name).iterdir()
    return folder
