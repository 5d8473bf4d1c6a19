"""Backbone `trinity`: translate the config, export the tasks, run `trinity run`.

Writes `trinity_config.yaml` and `tasks/{train,validation}.jsonl` (one row
per task, the task itself in `astuner_task`) into the experiment folder,
checks for GPUs, starts a Ray head when asked (`--with-ray`; Trinity needs
a running cluster), and runs Trinity. `trinity run` can exit 0 after a
failure, so the outcome is read from its output as well as its exit code.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from astuner.api import AstunerError
from astuner.training import (
    AstunerConfig,
    Plugins,
    RunContext,
    RunUses,
    build_reader,
    ray_head_for_run,
    require_gpus,
)
from astuner_backbone_trinity.plugin import INSTALL_HINT, astuner_readiness
from astuner_backbone_trinity.translate import engine_config

# what Trinity logs when a stage failed although the process exits 0
FAILURE_MARKERS = (
    "Benchmark failed",
    "Explorer failed",
    "Trainer failed",
    "Traceback (most recent call last)",
)


class TrinityBackbone:
    def run_uses(self, config: AstunerConfig) -> RunUses:
        """Both splits (exported as the run starts); Trinity's workers load the model and serve it themselves,
        so neither `model.path` nor `rollout.engine` is checked on this machine."""
        return RunUses(engine=False, model="elsewhere")

    def engine_config(self, config: AstunerConfig, plugins: Plugins) -> dict[str, Any]:
        """The translated Trinity config (without the run's task files and folders)."""
        return engine_config(config, plugins)

    def prepare(self, ctx: RunContext) -> Path:
        """Write the run's files into the experiment folder; the Trinity config file."""
        config, folder = ctx.config, ctx.experiment.path.resolve()
        tasks = folder / "tasks"
        tasks.mkdir(exist_ok=True)
        reader = build_reader(config, ctx.plugins)
        for split in ("train", "validation"):
            with (tasks / f"{split}.jsonl").open("w", encoding="utf-8") as out:
                for task in reader.read(split):  # type: ignore[arg-type]
                    out.write(json.dumps({"astuner_task": task.model_dump_json()}) + "\n")
        nested = engine_config(config, ctx.plugins)
        nested["checkpoint_root_dir"] = str(ctx.experiment.checkpoints.resolve())
        nested["buffer"]["explorer_input"]["taskset"].update(
            {
                "name": "astuner_train",
                "storage_type": "file",
                "path": str(tasks),
                "split": "train",
                "workflow_args": {
                    "astuner_config": str(ctx.experiment.config_file.resolve()),
                    "astuner_search_paths": [str(p.resolve()) for p in config.search_paths()],
                },
            }
        )
        path = folder / "trinity_config.yaml"
        path.write_text(yaml.safe_dump(nested, sort_keys=False), encoding="utf-8")
        return path

    def run(self, ctx: RunContext) -> None:
        if astuner_readiness() is not None:
            raise AstunerError(f"The trinity backbone needs Trinity-RFT in this environment: {INSTALL_HINT}.")
        config_path = self.prepare(ctx)
        require_gpus("trinity")
        command = [str(Path(sys.executable).with_name("trinity")), "run", "--config", str(config_path)]
        with ray_head_for_run(ctx.with_ray):
            run_trinity(command, ctx.experiment.path / "trinity.log")


def run_trinity(command: list[str], log_path: Path) -> None:
    """Run Trinity, echoing its output; fail on a non-zero exit or a failure it only logged."""
    tail: list[str] = []
    failed: str | None = None
    with log_path.open("w", encoding="utf-8") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            log.write(line)
            tail = [*tail[-39:], line]
            if failed is None and any(marker in line for marker in FAILURE_MARKERS):
                failed = line.strip()
        code = process.wait()
    if code != 0 or failed is not None:
        reason = f"exited with code {code}" if code != 0 else f"logged a failure ({failed})"
        raise AstunerError(f"trinity run {reason}; full output in {log_path}. Last lines:\n{''.join(tail)}")
