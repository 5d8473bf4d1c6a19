"""One run of a backbone: what `astuner run` and `astuner.tune()` both do.

`prepare_run` checks the reader's, judge's and notifiers' settings blocks,
builds the backbone, makes the experiment folder and sends the log into it;
the `PreparedRun` it returns then runs the backbone, with the run's
companion services around it. The CLI starts its log viewer in between.

The run folder's `status.json` says `running` from the start and how the
run ended at the end (`run_status`); then the notifiers hear of it
(`notify`) and the last lines printed say what the run produced and what to
do next.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from astuner.checkpoint_model import checkpoint_of
from astuner.companions import companions_for_run
from astuner.compat import switched_on_notifiers
from astuner.components import build, build_backbone, plugin_settings
from astuner.config import AstunerConfig
from astuner.errors import AstunerError
from astuner.logs import close_log_file, configure_logging, get_logger
from astuner.notify import RunSummary, notify_run_end, summarize
from astuner.plugins import MOVED_OUT, Plugins, install_hint
from astuner.protocols import Backbone, RunContext
from astuner.record import ExperimentDir
from astuner.run_status import end_run, mark_running


@dataclass
class PreparedRun:
    """A built backbone and its fresh experiment folder, ready to run."""

    config: AstunerConfig
    plugins: Plugins
    backbone: Backbone
    experiment: ExperimentDir

    def execute(self, *, with_ray: bool = False, companions: Mapping[str, str | None] | None = None) -> None:
        """Run the backbone to the end; the companions (`--with-NAME VALUE`) live as long as it does."""
        log = get_logger(backbone=self.config.backbone)
        log.info("run started", experiment=str(self.experiment.path), config=str(self.config.source or "-"))
        ending: BaseException | None = None
        try:
            with companions_for_run(self.config, self.plugins, self.experiment.path, companions or {}):
                context = RunContext(
                    config=self.config, experiment=self.experiment, plugins=self.plugins, with_ray=with_ray
                )
                self.backbone.run(context)
        except BaseException as exc:
            ending = exc
            raise
        finally:
            try:
                ended = end_run(self.experiment.path, ending)
                state, reason = ended.state, ended.reason
                checkpoint = checkpoint_of(self.backbone, [self.experiment.path])  # the backbone's code
                summary = summarize(self.config, self.experiment, ended, checkpoint)
                log.info(f"run {state}", experiment=str(self.experiment.path), reason=reason or None)
                notify_run_end(self.config, self.plugins, summary)
            finally:
                close_log_file()
            commands = self.plugins.command_names()
            _say("\n".join(closing_lines(summary, self.config, commands)))


def prepare_run(config: AstunerConfig, plugins: Plugins, *, verbose: bool = False) -> PreparedRun:
    """Validate what the run will build, then make its folder; nothing is created for a bad config."""
    for kind, name in (("reader", config.task_reader.type), ("judge", config.task_judge.judge_protocol)):
        plugin_settings(config, plugins.get(kind, name, config.search_paths()))
    if config.rollout.agentscope_workflow:  # a misspelled workflow must fail before the run folder exists
        plugins.get("workflow", config.rollout.agentscope_workflow, config.search_paths())
    for name in config.notify:  # a notifier the config asks for must be able to run
        build(config, plugins, "notifier", name)
    backbone = build_backbone(config, plugins)
    experiment = ExperimentDir.create(config)
    mark_running(experiment.path)
    configure_logging(verbose=verbose, log_file=experiment.log_file)
    for name, variable in switched_on_notifiers(config.notify).items():  # say what is missing, run anyway
        if name not in plugins.registry("notifier"):
            get_logger().warning(
                f"{variable} is set, which asks the notifier '{name}' to tell of the run's end, and that "
                f"notifier is not installed; the run goes on without it. {install_hint('notifier', name)}"
            )
            continue
        try:
            build(config, plugins, "notifier", name)
        except AstunerError as exc:
            get_logger().warning(str(exc))
    return PreparedRun(config, plugins, backbone, experiment)


def _say(text: str) -> None:
    """Print `text` even where it holds a name that is not UTF-8 (a config file `caf\\xe9.yaml`).

    Python keeps such bytes as lone surrogates, which a strict stdout (any
    UTF-8 locale but C.UTF-8) refuses: the run's end would then raise after
    the run itself had finished. What the stream cannot take is shown escaped
    (`\\udce9`) instead.
    """
    try:
        print(text, flush=True)
    except UnicodeEncodeError:
        encoding = sys.stdout.encoding or "utf-8"
        print(text.encode(encoding, "backslashreplace").decode(encoding), flush=True)


def closing_lines(summary: RunSummary, config: AstunerConfig, commands: Collection[str]) -> list[str]:
    """What the run produced and what to do next, as the run's last printed lines.

    A next step whose command no installed plugin provides (`commands`: those
    there are) says which plugin does.
    """

    def needs(command: str) -> str:
        return "" if command in commands else f"  (needs {MOVED_OUT[('command', command)]})"

    folder = summary.experiment
    why = f" ({summary.reason})" if summary.reason else ""
    lines = [
        f"run {summary.status}{why} after {summary.duration_s / 60:.1f} min, {summary.steps} steps: {folder}"
    ]
    lines.append(f"  records:     {folder}/rollouts/")
    if summary.checkpoint:
        lines.append(f"  checkpoint:  {summary.checkpoint}")
    if os.path.isdir(os.path.join(folder, "tensorboard")):
        lines.append(f"  tensorboard: tensorboard --logdir {folder}/tensorboard")
    lines.append(f"  look:        astuner logview {folder}{needs('logview')}")
    if summary.checkpoint:
        lines.append(
            f"  evaluate:    astuner eval --conf {folder}/config.yaml --checkpoint {summary.checkpoint}"
            + needs("eval")
        )
    if summary.status == "failed":
        lines.append(f"  why:         the end of {folder}/astuner.log")
    elif summary.status == "killed" and summary.checkpoint:
        lines.append(
            f"  resume:      astuner run --conf {config.source or folder + '/config.yaml'} "
            "-o trainer_common.resume=auto"
        )
    return lines
