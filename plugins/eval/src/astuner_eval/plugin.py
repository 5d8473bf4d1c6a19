"""Entry point of `astuner-eval`: command `astuner eval --conf X [--checkpoint DIR]`.

The command evaluates with the CLI's plugins, in a run opened by the `runs`
the `register_commands` hook is handed; the work is in
`astuner_eval.evaluation`.
Importing this module is cheap: the rollout stack loads when an evaluation runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer
from rich.console import Console
from rich.table import Table

from astuner.api import Runs, Split, hookimpl
from astuner.training import (
    COMPANION_ARGS,
    ConfOption,
    OverrideOption,
    check_plugin_blocks,
    companion_requests,
    handle_user_errors,
    load_config,
)

if TYPE_CHECKING:
    from astuner_eval.evaluation import EvalReport


def eval_command(runs: Runs) -> Callable[..., None]:
    """The command `astuner eval`, evaluating with the CLI's plugins in a run `runs` opens."""

    @handle_user_errors
    def evaluate(
        ctx: typer.Context,
        conf: ConfOption,
        checkpoint: Annotated[
            Path | None,
            typer.Option(
                help="A checkpoints/step_<n> folder of a torch run (with per-agent adapters: each "
                "agent's adapter on the config's model.path), or 'latest': the highest step of this "
                "config's experiment; default: the config's model.path."
            ),
        ] = None,
        split: Annotated[str, typer.Option(help="train or validation.")] = "validation",
        n_samples: Annotated[
            int,
            typer.Option(
                "--n-samples", "-k", min=1, help="Runs per task: 1 is greedy; k samples give pass@k."
            ),
        ] = 1,
        temperature: Annotated[
            float | None,
            typer.Option(
                min=0.0, help="Sampling temperature (default: 0 for one sample, else the config's)."
            ),
        ] = None,
        max_tasks: Annotated[
            int | None, typer.Option("--max-tasks", min=1, help="Evaluate only the first N tasks.")
        ] = None,
        override: OverrideOption = None,
    ) -> None:
        """Evaluate the config's model or a checkpoint: mean reward, success rate, pass@k.

        Companion services run beside the evaluation as beside a run:
        `--with-NAME [VALUE]` (listed by `astuner run --help`).
        """
        from astuner_eval.evaluation import EvalOptions, run_eval  # the rollout stack: only when evaluating

        plugins = runs.plugins
        companions = companion_requests(ctx.args, plugins)
        config = load_config(conf, override or [], for_training=False)
        plugins.check_conflicts()
        check_plugin_blocks(config, plugins)
        options = EvalOptions(
            split=cast(Split, split),  # run_eval says which splits exist
            n_samples=n_samples,
            temperature=temperature,
            max_tasks=max_tasks,
            checkpoint=checkpoint,
            companions=companions,
        )
        print_report(run_eval(config, runs, options))

    return evaluate


def print_report(report: EvalReport) -> None:
    """The scores as a table: reward, success, pass@k, errors, then tool use when tools were offered,
    then each judge metric's mean (`judge: <name>`)."""
    from astuner_eval.evaluation import SUMMARY_FILE

    s, m = report.summary, report.metrics
    errors = round(m["eval/error_rate"] * len(report.trajectories))
    samples = "1 sample" if s["n_samples"] == 1 else f"{s['n_samples']} samples"
    typer.echo(
        f"eval: {s['checkpoint'] or s['model']} on {s['split']}, {s['tasks']} tasks x {samples} "
        f"at temperature {s['temperature']:g}"
    )
    if s["adapters"]:
        for agent, folder in s["adapters"].items():
            typer.echo(f"  agent {agent}: adapter {folder} on {s['model']}")
    elif s["checkpoint"] and s["model"] != s["checkpoint"]:
        typer.echo(f"  (a LoRA adapter, merged into its base model in {s['model']})")
    table = Table("metric", "value")
    table.add_row("mean reward", f"{m['eval/reward_mean']:.4f}")
    table.add_row("success rate", f"{m['eval/success_rate']:.4f}")
    table.add_row(f"pass@{s['n_samples']}", f"{m[report.pass_key]:.4f}")
    table.add_row("errors", f"{errors}/{len(report.trajectories)}")
    if m.get("eval/tools_offered_rate"):
        table.add_row("tool calls per reply", f"{m['eval/tool_calls_per_reply']:.4f}")
        table.add_row("episodes with a tool call", f"{m['eval/episodes_with_tool_call']:.4f}")
    for name, mean in s["judge_metrics"].items():
        table.add_row(f"judge: {name}", f"{mean:.4f}")
    Console(width=160, highlight=False).print(table)
    typer.echo(f"trajectories: {s['rollouts']}")
    typer.echo(f"summary:      {report.experiment.path / SUMMARY_FILE}")


@hookimpl
def register_commands(cli: typer.Typer, runs: Runs) -> None:
    cli.command("eval", context_settings=COMPANION_ARGS)(eval_command(runs))
