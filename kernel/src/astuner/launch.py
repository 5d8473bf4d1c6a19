"""Running a backbone: what `astuner run` and `astuner.tune()` both do.

`prepare_run` builds the backbone and opens the run
(`astuner.lifecycle.RunLifecycle`: the checks before any folder, then the
folder, log file, status, notifiers); the `PreparedRun` it returns then runs the
backbone inside that run's life, which says how it ended. The CLI starts its
log viewer in between.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from astuner.checkpoint_model import checkpoint_of
from astuner.components import build_backbone, run_uses
from astuner.config import AstunerConfig
from astuner.lifecycle import RunLifecycle
from astuner.plugins import Plugins
from astuner.protocols import Backbone, RunContext
from astuner.record import ExperimentDir


@dataclass
class PreparedRun:
    """A built backbone and its opened run, ready to go."""

    backbone: Backbone
    lifecycle: RunLifecycle

    @property
    def experiment(self) -> ExperimentDir:
        return self.lifecycle.experiment

    def execute(self, *, with_ray: bool = False) -> None:
        """Run the backbone to the end; its newest checkpoint, as it finds it, is the run's."""
        with self.lifecycle as run:
            context = RunContext(
                config=run.config, experiment=run.experiment, plugins=run.plugins, with_ray=with_ray
            )
            try:
                self.backbone.run(context)
            finally:
                run.checkpoint = checkpoint_of(self.backbone, [run.experiment.path])  # the backbone's code


def prepare_run(
    config: AstunerConfig,
    plugins: Plugins,
    *,
    verbose: bool = False,
    companions: Mapping[str, str | None] | None = None,
) -> PreparedRun:
    """Build the backbone, then open the run; nothing is created for a bad config.

    `RunLifecycle.open` checks the rest (`astuner.components.preflight`), of
    what the backbone says its run uses, before it makes the folder.
    `companions` (`--with-NAME VALUE`) live as long as the backbone runs.
    """
    backbone = build_backbone(config, plugins)
    lifecycle = RunLifecycle.open(
        config,
        plugins,
        command="run",
        verbose=verbose,
        companions=companions,
        uses=run_uses(backbone, config),
    )
    lifecycle.resume = ""  # `astuner run --conf X -o trainer_common.resume=auto` takes it up again
    return PreparedRun(backbone, lifecycle)
