"""Backbone `verl`: translate the config, export the tasks, run verl's PPO trainer.

`astuner run --backbone verl` writes into the experiment folder:
`verl_config.yaml` (the translated config, for reading), `verl_overrides.txt`
(what is passed to `python -m verl.trainer.main_ppo`), `agent_loops.yaml`
(the `astuner` agent loop with the paths it needs) and `data/{train,
validation}.parquet` (one row per task, the task itself in `extra_info`).
It then checks for GPUs, starts a Ray head when asked (`--with-ray`), and
runs verl, streaming its output to the console and to `verl.log`.
"""

from __future__ import annotations

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
    nest,
    ray_head_for_run,
    require_gpus,
)
from astuner_backbone_verl.plugin import INSTALL_HINT, astuner_readiness
from astuner_backbone_verl.translate import AGENT_LOOP_NAME, hydra_overrides, translate

AGENT_LOOP_CLASS = "astuner_backbone_verl.agent_loop.AstunerAgentLoop"


class VerlBackbone:
    def run_uses(self, config: AstunerConfig) -> RunUses:
        """Both splits (exported as the run starts); verl's workers load the model and serve it themselves,
        so neither `model.path` nor `rollout.engine` is checked on this machine."""
        return RunUses(engine=False, model="elsewhere")

    def engine_config(self, config: AstunerConfig, plugins: Plugins) -> dict[str, Any]:
        """The translated verl config (without the run's data files and folders)."""
        return nest(translate(config, plugins))

    def prepare(self, ctx: RunContext) -> list[str]:
        """Write the run's files into the experiment folder; the overrides for verl."""
        config, folder = ctx.config, ctx.experiment.path.resolve()
        data = folder / "data"
        data.mkdir(exist_ok=True)
        reader = build_reader(config, ctx.plugins)
        for split in ("train", "validation"):
            write_task_rows(data / f"{split}.parquet", reader.read(split))  # type: ignore[arg-type]
        loops = folder / "agent_loops.yaml"
        loops.write_text(
            yaml.safe_dump(
                [
                    {
                        "name": AGENT_LOOP_NAME,
                        "_target_": AGENT_LOOP_CLASS,
                        "astuner_config": str(ctx.experiment.config_file.resolve()),
                        "astuner_search_paths": [str(p.resolve()) for p in config.search_paths()],
                    }
                ]
            ),
            encoding="utf-8",
        )
        flat = translate(config, ctx.plugins)
        flat.update(
            {
                "data.train_files": str(data / "train.parquet"),
                "data.val_files": str(data / "validation.parquet"),
                "trainer.default_local_dir": str(ctx.experiment.checkpoints.resolve()),
                "actor_rollout_ref.rollout.agent.agent_loop_config_path": str(loops),
            }
        )
        (folder / "verl_config.yaml").write_text(
            yaml.safe_dump(nest(flat), sort_keys=False), encoding="utf-8"
        )
        overrides = hydra_overrides(flat)
        (folder / "verl_overrides.txt").write_text("\n".join(overrides) + "\n", encoding="utf-8")
        return overrides

    def run(self, ctx: RunContext) -> None:
        if astuner_readiness() is not None:
            raise AstunerError(f"The verl backbone needs verl in this environment: {INSTALL_HINT}.")
        overrides = self.prepare(ctx)
        require_gpus("verl")
        command = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides]
        with ray_head_for_run(ctx.with_ray):
            stream(command, ctx.experiment.path / "verl.log")


def write_task_rows(path: Path, tasks: Any) -> int:
    """verl's dataset rows, one per task: the chat prompt, and the task itself in extra_info."""
    import pandas as pd

    rows = [
        {
            "data_source": "astuner",
            "agent_name": AGENT_LOOP_NAME,
            "prompt": [{"role": "user", "content": task.main_query}],
            "reward_model": {"style": "astuner", "ground_truth": ""},
            "extra_info": {"astuner_task": task.model_dump_json(), "index": i},
        }
        for i, task in enumerate(tasks)
    ]
    pd.DataFrame(rows).to_parquet(path)
    return len(rows)


def stream(command: list[str], log_path: Path) -> None:
    """Run `command`, echoing its output to the console and to `log_path`; fail on a non-zero exit."""
    tail: list[str] = []
    with log_path.open("w", encoding="utf-8") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            log.write(line)
            tail = [*tail[-39:], line]
        code = process.wait()
    if code != 0:
        raise AstunerError(
            f"verl exited with code {code} (full output in {log_path}). Last lines:\n{''.join(tail)}"
        )
