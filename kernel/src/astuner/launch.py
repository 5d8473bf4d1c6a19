"""One run of a backbone: what `astuner run` and `astuner.tune()` both do.

`prepare_run` checks the reader's and judge's settings blocks, builds the
backbone, makes the experiment folder and sends the log into it; the
`PreparedRun` it returns then runs the backbone, with the run's companion
services around it. The CLI starts its log viewer in between.
"""

from __future__ import annotations

from dataclasses import dataclass

from astuner.companions import companions_for_run
from astuner.components import build_backbone, plugin_settings
from astuner.config import AstunerConfig
from astuner.logs import configure_logging, get_logger
from astuner.plugins import Plugins
from astuner.protocols import Backbone, RunContext
from astuner.record import ExperimentDir


@dataclass
class PreparedRun:
    """A built backbone and its fresh experiment folder, ready to run."""

    config: AstunerConfig
    plugins: Plugins
    backbone: Backbone
    experiment: ExperimentDir

    def execute(
        self, *, with_ray: bool = False, with_env: str | None = None, with_appworld: bool = False
    ) -> None:
        """Run the backbone to the end; companion services (`--with-env`, ...) live as long as it does."""
        log = get_logger(backbone=self.config.backbone)
        log.info("run started", experiment=str(self.experiment.path), config=str(self.config.source or "-"))
        with companions_for_run(
            self.config, self.experiment.path, with_env=with_env, with_appworld=with_appworld
        ):
            self.backbone.run(
                RunContext(
                    config=self.config, experiment=self.experiment, plugins=self.plugins, with_ray=with_ray
                )
            )
        log.info("run finished", experiment=str(self.experiment.path))


def prepare_run(config: AstunerConfig, plugins: Plugins, *, verbose: bool = False) -> PreparedRun:
    """Validate what the run will build, then make its folder; nothing is created for a bad config."""
    for kind, name in (("reader", config.task_reader.type), ("judge", config.task_judge.judge_protocol)):
        plugin_settings(config, plugins.get(kind, name, config.search_paths()))
    if config.rollout.agentscope_workflow:  # a misspelled workflow must fail before the run folder exists
        plugins.get("workflow", config.rollout.agentscope_workflow, config.search_paths())
    backbone = build_backbone(config, plugins)
    experiment = ExperimentDir.create(config)
    configure_logging(verbose=verbose, log_file=experiment.log_file)
    return PreparedRun(config, plugins, backbone, experiment)
