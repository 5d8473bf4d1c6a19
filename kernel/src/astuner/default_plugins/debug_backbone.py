"""Backbone `debug`: run the workflow on the first few tasks, no training, no Ray.

Rollouts run in the main thread's event loop, so with
`debug.debug_max_parallel: 1` a breakpoint in workflow code stops exactly
there under `python -m debugpy` or an IDE. Every trajectory is written to
`rollouts/debug.jsonl` in the experiment folder as its run ends, and a table
summarises them.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import TYPE_CHECKING

from astuner.core.health import HealthMonitor
from astuner.core.metrics import tool_metrics
from astuner.core.trajectory import Trajectory
from astuner.errors import AstunerError
from astuner.hookspecs import Register, hookimpl
from astuner.logs import get_logger
from astuner.protocols import RunContext

if TYPE_CHECKING:
    from rich.table import Table

    from astuner.components import RunUses
    from astuner.config import AstunerConfig

# The plugin manager imports this module whenever the CLI starts: the rollout stack (and the web
# server behind its gateway), the reader's builder and rich load when the backbone runs.


class DebugBackbone:
    def run(self, ctx: RunContext) -> None:
        asyncio.run(self.run_async(ctx))

    def run_uses(self, config: AstunerConfig) -> RunUses:
        """The split it looks at (`debug.split`) and the training file: a debug look comes before
        training on the same config. The model is loaded where `rollout.engine` runs."""
        from astuner.components import RunUses

        return RunUses(splits=frozenset({"train", config.debug.split}))

    async def run_async(self, ctx: RunContext) -> list[Trajectory]:
        from rich.console import Console

        from astuner.components import build_reader
        from astuner.rollout.stack import rollout_stack, sampling_from_config

        config, debug = ctx.config, ctx.config.debug
        reader = build_reader(config, ctx.plugins)
        tasks = list(itertools.islice(reader.read(debug.split), debug.debug_first_n_tasks))
        if not tasks:
            raise AstunerError(f"The {debug.split} split of reader '{config.task_reader.type}' is empty.")
        stack = rollout_stack(config, ctx.plugins, max_parallel=debug.debug_max_parallel, reader=reader)
        path = ctx.experiment.rollouts / "debug.jsonl"
        async with stack as runner:
            trajectories = await runner.run(
                tasks, sampling_from_config(config.rollout), debug.num_repeat, tag="debug", record=path
            )
        Console(width=160).print(summary_table(trajectories))
        log = get_logger()
        log.info("debug rollouts written", path=str(path), trajectories=len(trajectories))
        tools = tool_metrics(trajectories, "debug")
        log.info("tool use", **{k.split("/", 1)[1]: round(v, 3) for k, v in tools.items()})
        acknowledged = frozenset(config.health.acknowledged)
        HealthMonitor(prefixes=("debug",), acknowledged=acknowledged).observe("debug rollouts", tools)
        return trajectories


def summary_table(trajectories: list[Trajectory]) -> Table:
    from rich.table import Table

    table = Table(
        "task", "rollout", "reward", "success", "turns", "tool calls", "tokens", title="debug rollouts"
    )
    table.add_column("error", overflow="ellipsis", no_wrap=True, max_width=70)
    for t in trajectories:
        reward = (
            "-" if t.reward is None else (f"{t.reward:.3f}" if isinstance(t.reward, float) else str(t.reward))
        )
        error = t.error.strip().splitlines()[-1][:80] if t.error else ""
        table.add_row(
            t.task_id,
            t.trajectory_id,
            reward,
            "-" if t.is_success is None else str(t.is_success),
            str(len(t.calls)),
            _tool_calls(t),
            str(sum(len(c.response_ids) for c in t.calls)),
            error,
        )
    return table


def _tool_calls(trajectory: Trajectory) -> str:
    """Parsed tool calls, and the replies whose call did not parse."""
    parsed = sum(len(c.tool_calls) for c in trajectory.calls)
    broken = sum(c.tool_parse_error is not None for c in trajectory.calls)
    return f"{parsed} ({broken} unparsed)" if broken else str(parsed)


@hookimpl
def register_backbones(register: Register) -> None:
    register(
        "debug",
        DebugBackbone,
        summary="Rollouts on the first tasks; no training, no Ray.",
        reads=("debug",),  # its own block; no trainer_common, no batch sizes
    )
