"""A backbone `count_tasks`: writes how many tasks each split has into the run's folder; trains nothing."""

import json

from astuner.api import Register, hookimpl
from astuner.training import RunContext, build_reader


class CountTasks:
    def run(self, ctx: RunContext) -> None:
        reader = build_reader(ctx.config, ctx.plugins)
        counts = {split: sum(1 for _ in reader.read(split)) for split in ("train", "validation")}
        (ctx.experiment.path / "task_counts.json").write_text(json.dumps(counts))


@hookimpl
def register_backbones(register: Register) -> None:
    register("count_tasks", CountTasks, summary="Counts the tasks of each split.")
