"""Commands `astuner where --conf X`: the folder that runs of a config are written to, and
`astuner snapshot --conf X`: a run of its own that keeps the config and the plugins it would run with."""

import json

import typer

from astuner.api import Runs, hookimpl
from astuner.training import ConfOption, OverrideOption, handle_user_errors, load_config


@hookimpl
def register_commands(cli: typer.Typer, runs: Runs) -> None:
    @cli.command()
    @handle_user_errors
    def where(conf: ConfOption, override: OverrideOption = None) -> None:
        """Print the folder that runs of this config are written to."""
        config = load_config(conf, override)
        typer.echo(f"{config.experiment_dir}/{config.experiment_name}")

    @cli.command()
    @handle_user_errors
    def snapshot(conf: ConfOption, override: OverrideOption = None) -> None:
        """Keep the resolved config and the loaded plugins in a run folder (status, log, closing lines)."""
        config = load_config(conf, override)
        with runs.open(config, command="snapshot") as run:  # the folder gets config.yaml
            plugins = [info.as_dict() for info in runs.plugins.infos()]  # the CLI's own plugins
            (run.experiment.path / "plugins.json").write_text(json.dumps(plugins, indent=1))
