"""One run's life, whichever command runs it: `astuner run`, `tune()`, `eval`, `sft`, a plugin's.

`RunLifecycle.open` checks what would fail the run in its first seconds
(`astuner.components.preflight`: the reader's files, the model folder, the
engine) and the notifiers the config names, then makes the run's folder
(`ExperimentDir`), marks it `running` in `status.json` with the command
that runs it, and sends the log into the folder. Used as a context
manager around the command's work, it starts the companion services
(`--with-NAME`) and stops them after; then it writes how the run ended
(`run_status`), tells the notifiers (`notify`), closes the log file and
prints the closing lines: what the run produced and what to do next.

The command says what only it knows: the checkpoint its work wrote
(`checkpoint`), how to resume it (`resume`) and lines of its own
(`next_steps`). The config's `backbone` stays the config's: the command is
recorded beside it, in `status.json` and in the notifiers' `RunSummary`.

Commands that plugins add receive a `Runs` from the `register_commands`
hook: the loaded plugins, and `runs.open(config, command=...)`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from astuner.compat import switched_on_notifiers
from astuner.errors import AstunerError
from astuner.logs import close_log_file, configure_logging, get_logger
from astuner.plugins import MOVED_OUT, Plugins, Registration, install_hint
from astuner.run_status import end_run, mark_running

if TYPE_CHECKING:
    from astuner.components import RunUses
    from astuner.config import AstunerConfig
    from astuner.notify import Notifier, RunSummary
    from astuner.record import ExperimentDir

# What a run builds (components, companions, notifiers, its folder) is imported when a run opens,
# so that handing `Runs` to the plugins' commands while `astuner --help` lists them stays cheap.


class RunLifecycle:
    """A run's folder, log file, status, companions, notifiers and closing lines, for one command.

    Made by `open`; `with lifecycle:` around the work. Inside, the work may
    set `checkpoint` (the newest checkpoint it wrote: shown, told to the
    notifiers, offered to `astuner eval`), `resume` (the arguments after
    `--conf X` that run the same command again: a run killed after a
    checkpoint then says how to resume it; None: it cannot be resumed) and
    append to `next_steps` (lines printed after the usual ones).
    """

    def __init__(
        self,
        config: AstunerConfig,
        plugins: Plugins,
        command: str,
        experiment: ExperimentDir,
        companions: Mapping[str, str | None],
    ) -> None:
        self.config = config
        self.plugins = plugins
        self.command = command
        self.experiment = experiment
        self.companions = dict(companions)
        self.checkpoint: Path | None = None
        self.resume: str | None = None
        self.next_steps: list[str] = []
        self._session: AbstractContextManager[RunLifecycle] | None = None

    @classmethod
    def open(
        cls,
        config: AstunerConfig,
        plugins: Plugins,
        *,
        command: str,
        verbose: bool = False,
        companions: Mapping[str, str | None] | None = None,
        uses: RunUses | None = None,
    ) -> RunLifecycle:
        """Check the config, then make the run's folder, mark it running and log into it.

        What `preflight` checks of what the command `uses` (default: all a
        run may use) and a notifier the config names that cannot be built
        fail here, before any folder exists; a notifier that only the seeds'
        environment switches on is a warning in the run's log, and the run
        goes on without it.
        """
        from astuner.components import build, preflight, saved_config
        from astuner.record import ExperimentDir
        from astuner.rollout.progress import progress_every_s

        preflight(config, plugins, uses)
        progress_every_s()  # a wrong ASTUNER_PROGRESS_EVERY_S stops here, not at the first batch
        for name in config.notify:
            build(config, plugins, "notifier", name)
        experiment = ExperimentDir.create(
            config.experiment_dir, config.experiment_name, saved_config(config, plugins)
        )
        mark_running(experiment.path, command)
        configure_logging(verbose=verbose, log_file=experiment.log_file)
        _warn_of_unbuildable_notifiers(config, plugins, experiment.path)
        return cls(config, plugins, command, experiment, companions or {})

    def __enter__(self) -> RunLifecycle:
        self._session = self._live()
        return self._session.__enter__()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._session is not None, "RunLifecycle.__exit__ without __enter__"
        return self._session.__exit__(kind, exc, tb)

    @contextmanager
    def _live(self) -> Iterator[RunLifecycle]:
        from astuner.companions import companions_for_run
        from astuner.notify import enabled_notifiers, notify_run_end, summarize

        log = get_logger(command=self.command, backbone=self.config.backbone)
        path = str(self.experiment.path)
        log.info(f"{self.command} started", experiment=path, config=str(self.config.source or "-"))
        ending: BaseException | None = None
        try:
            with companions_for_run(self._start_companion, self.plugins, self.companions):
                yield self
        except BaseException as exc:
            ending = exc
            raise
        finally:
            try:
                ended = end_run(self.experiment.path, ending)
                name, backbone = self.config.experiment_name, self.config.backbone
                summary = summarize(name, backbone, self.experiment, ended, self.checkpoint, self.command)
                why = {"reason": ended.reason} if ended.reason else {}  # a finished run has none to give
                log.info(f"{self.command} {ended.state}", experiment=path, **why)
                notify_run_end(
                    enabled_notifiers(self.config.notify, self.plugins), self._build_notifier, summary
                )
            finally:
                close_log_file()
            _say("\n".join(self.closing_lines(summary, self.plugins.command_names(Runs(self.plugins)))))

    def _start_companion(self, registration: Registration, value: str | None) -> AbstractContextManager[Any]:
        """Companion `registration` as `--with-NAME value` asks, with this run's services and folder."""
        from astuner.components import build_companion

        return build_companion(self.config, self.plugins, registration, value, self.experiment.path)

    def _build_notifier(self, name: str) -> Notifier:
        """Notifier `name` with its `notify.<name>` settings block."""
        from astuner.components import build

        return build(self.config, self.plugins, "notifier", name, run_folder=self.experiment.path)

    def abandon(self, exc: BaseException) -> None:
        """End a run whose work will not start (what it needed beside it, a log viewer, failed to).

        Its `status.json` says why it failed and its log file is closed, so the
        process's later lines (the next run, a notebook's next cell) do not land
        in this folder. Nothing ran: no companion is stopped, no notifier told.
        """
        try:
            ended = end_run(self.experiment.path, exc)
            get_logger(command=self.command).info(
                f"{self.command} {ended.state}", experiment=str(self.experiment.path), reason=ended.reason
            )
        finally:
            close_log_file()

    def closing_lines(self, summary: RunSummary, commands: Collection[str]) -> list[str]:
        """What the run produced and what to do next, as the run's last printed lines.

        A next step whose command no installed plugin provides (`commands`:
        those there are) says which plugin does.
        """

        def needs(command: str) -> str:
            return "" if command in commands else f"  (needs {MOVED_OUT[('command', command)]})"

        folder = summary.experiment
        why = f" ({summary.reason})" if summary.reason else ""
        minutes = summary.duration_s / 60
        lines = [
            f"{self.command} {summary.status}{why} after {minutes:.1f} min, {summary.steps} steps: {folder}"
        ]
        if os.path.isdir(os.path.join(folder, "rollouts")):  # a run that failed at once wrote none
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
        elif summary.status == "killed" and summary.checkpoint and self.resume is not None:
            conf = self.config.source or folder + "/config.yaml"
            again = f" {self.resume}" if self.resume else ""
            lines.append(
                f"  resume:      astuner {self.command} --conf {conf}{again} -o trainer_common.resume=auto"
            )
        lines += [f"  health:      {line}" for line in self._health_lines()]
        return [*lines, *self.next_steps]

    def _health_lines(self) -> list[str]:
        """On how many steps each health check fired, read back from the run's `metrics.jsonl`.

        Read from the file rather than asked of the backbone, so every
        backbone's runs get them. The checks read training steps (`train/`,
        `actor/`): a run without any (`astuner eval`, `astuner sft`) has none.
        """
        from astuner.core.health import health_lines
        from astuner.core.metric_catalog import metric_catalog
        from astuner.record import read_metrics

        rows = read_metrics(self.experiment.metrics_file)
        return health_lines(rows, metric_catalog(self.plugins), self.config.health.acknowledged)


class Runs:
    """What a command a plugin adds is handed (`register_commands(cli, runs)`): the plugins, and runs.

    `runs.plugins` is the CLI's own plugin manager (everything loaded,
    narrowed by ASTUNER_LOAD_PLUGINS); `runs.open(config, command="name")`
    starts a run of that command as `astuner run` starts its own.
    """

    def __init__(self, plugins: Plugins, verbose: Callable[[], bool] | None = None) -> None:
        self.plugins = plugins
        self._verbose = verbose  # asked at each open: `astuner --verbose` is parsed after the hook ran

    def open(
        self,
        config: AstunerConfig,
        *,
        command: str,
        companions: Mapping[str, str | None] | None = None,
        uses: RunUses | None = None,
    ) -> RunLifecycle:
        """`RunLifecycle.open` with these plugins and the command line's `--verbose`.

        `uses`: what the command uses of the config (`astuner.training.RunUses`),
        so that the checks before its folder refuse nothing it never reads.
        """
        verbose = self._verbose() if self._verbose is not None else False
        return RunLifecycle.open(
            config, self.plugins, command=command, verbose=verbose, companions=companions, uses=uses
        )


def _warn_of_unbuildable_notifiers(config: AstunerConfig, plugins: Plugins, run_folder: Path) -> None:
    """Say which notifier the seeds' environment switches on cannot run; the run goes on without it."""
    from astuner.components import build

    for name, variable in switched_on_notifiers(config.notify, plugins).items():
        if name not in plugins.registry("notifier"):
            get_logger().warning(
                f"{variable} is set, which asks the notifier '{name}' to tell of the run's end, and that "
                f"notifier is not installed; the run goes on without it. {install_hint('notifier', name)}"
            )
            continue
        try:
            build(config, plugins, "notifier", name, run_folder=run_folder)
        except AstunerError as exc:
            get_logger().warning(str(exc))


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
