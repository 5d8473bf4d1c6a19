"""Command `astuner sft --conf X --from PATH`: supervised warm start of the config's model (see `sft`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from astuner.api import Runs
from astuner.training import (
    ConfOption,
    OverrideOption,
    RunUses,
    check_plugin_blocks,
    handle_user_errors,
    load_config,
    plugin_settings,
)

SUFFIX = "-sft"

# What fine-tuning uses of the config: the model, loaded in this process; no reader (the samples come
# from --from), no workflow, judge or engine (nothing is generated).
SFT_USES = RunUses(splits=frozenset(), workflow=False, engine=False, model="here")


def sft_experiment(name: str) -> str:
    """The fine-tuning run's experiment (`<name>-sft`): one of its own, so RL never resumes from it."""
    return name if name.endswith(SUFFIX) else name + SUFFIX


def sft_command(runs: Runs) -> Callable[..., None]:
    """The command `astuner sft`, fine-tuning in a run `runs` opens: status, log, notifiers, closing lines."""

    @handle_user_errors
    def sft(
        conf: ConfOption,
        source: Annotated[
            Path,
            typer.Option(
                "--from",
                help="A demonstrations file (JSON lines of {messages, tools}), a rollout file "
                "(rollouts/step_<n>.jsonl) or a run folder: its trajectories that the judge passed.",
            ),
        ],
        epochs: Annotated[
            int | None, typer.Option(min=1, help="Passes over the samples (torch.sft.epochs).")
        ] = None,
        lr: Annotated[float | None, typer.Option(min=0.0, help="Learning rate (torch.sft.lr).")] = None,
        batch_size: Annotated[
            int | None, typer.Option("--batch-size", min=1, help="Samples per step (torch.sft.batch_size).")
        ] = None,
        min_reward: Annotated[
            float | None,
            typer.Option(
                "--min-reward",
                help="Keep recorded trajectories rewarded at least this (torch.sft.min_reward).",
            ),
        ] = None,
        override: OverrideOption = None,
    ) -> None:
        """Fine-tune the config's model on demonstrations or judged trajectories (a warm start before RL)."""
        from astuner_backbone_torch.checkpoint import latest_checkpoint  # torch: only when fine-tuning
        from astuner_backbone_torch.sft import run_sft
        from astuner_backbone_torch.translate import sft_run

        plugins = runs.plugins
        config = load_config(conf, override or [], backbone="torch")
        config.experiment_name = sft_experiment(config.experiment_name)
        plugins.check_conflicts()
        check_plugin_blocks(config, plugins)
        settings = plugin_settings(config, plugins.get("backbone", "torch"))
        given = {"epochs": epochs, "lr": lr, "batch_size": batch_size, "min_reward": min_reward}
        changes = {k: v for k, v in given.items() if v is not None}
        if changes:
            settings = settings.model_copy(update={"sft": settings.sft.model_copy(update=changes)})
        if not source.exists():
            raise typer.BadParameter(f"'{source}' does not exist.", param_hint="--from")
        with runs.open(config, command="sft", uses=SFT_USES) as run:
            run.resume = f"--from {source}"  # a stopped fine-tuning takes up again from its newest checkpoint
            try:
                last = run_sft(sft_run(config, settings), settings, source, run.experiment).resolve()
            finally:
                newest = latest_checkpoint([run.experiment.path])
                run.checkpoint = newest.path if newest is not None else None
            # --backbone: a config's own backbone is often `debug`, which would train nothing.
            reinforce = f"astuner run --conf {conf} --backbone torch -o model.path={last}"
            run.next_steps.append(f"  RL from it:  {reinforce}")

    return sft
