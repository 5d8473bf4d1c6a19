"""The `astuner` command line, built by `make_app(plugins)`.

Tests build an app around their own `Plugins` and drive it with typer's
runner; `main()` builds one with every installed plugin. Errors a user can
fix print as one paragraph on stderr (traceback only with `--verbose`).

Starting is cheap: `astuner --version` answers before the plugins, the
config models or the app are loaded, and the kernel modules a command needs
(the launch, the config display, the rollout stack) are imported when it
runs, not while `--help` lists the commands.
"""

from __future__ import annotations

import functools
import sys
import traceback
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from astuner.errors import AstunerError
from astuner.version import kernel_version

if TYPE_CHECKING:
    from rich.console import Console

    from astuner.config import AstunerConfig
    from astuner.plugins import Plugins

F = TypeVar("F", bound=Callable[..., Any])

ConfOption = Annotated[Path, typer.Option("--conf", "-c", help="The YAML config file.")]
OverrideOption = Annotated[
    list[str] | None,
    typer.Option(
        "--override", "-o", metavar="KEY=VALUE", help="A value over the config, e.g. rollout.temperature=0.7."
    ),
]
BackboneOption = Annotated[
    str | None, typer.Option("--backbone", "-b", help="Backbone to run (overrides the config).")
]


class _State:
    verbose = False


def is_verbose() -> bool:
    """Whether `astuner --verbose` was given (for plugin commands that set up logging)."""
    return _State.verbose


def _console(stderr: bool = False) -> Console:
    from rich.console import Console

    # Wide when not a terminal, so piped tables and errors stay on one line each.
    return Console(stderr=stderr, width=None if sys.stdout.isatty() else 200, highlight=False)


def handle_user_errors(fn: F) -> F:
    """Print user errors as one paragraph and exit 1; tracebacks only with --verbose.

    Plugins decorate their own commands with it (under `@app.command()`).
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except AstunerError as exc:
            if _State.verbose:
                traceback.print_exc()
            _console(stderr=True).print(f"[bold red]error:[/] {exc}", markup=True, soft_wrap=True)
            raise typer.Exit(1) from None
        except Exception as exc:
            if _State.verbose:
                traceback.print_exc()
            offer = "" if _State.verbose else " (run with --verbose for the traceback)"
            _console(stderr=True).print(
                f"[bold red]error:[/] {type(exc).__name__}: {exc}{offer}", markup=True, soft_wrap=True
            )
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def _load(
    plugins: Plugins,
    conf: Path,
    overrides: list[str] | None,
    backbone: str | None,
    *,
    for_training: bool = True,
) -> AstunerConfig:
    """The checked config; `for_training=False` where no backbone runs (no notice of keys it ignores)."""
    from astuner.components import check_plugin_blocks
    from astuner.config import load_config

    config = load_config(conf, overrides or [], backbone=backbone, for_training=for_training, plugins=plugins)
    plugins.check_conflicts()
    check_plugin_blocks(config, plugins)
    return config


def _print_version(asked: bool) -> None:
    # Eager: answered before typer looks for a command, so `astuner --version` alone works.
    if asked:
        typer.echo(f"astuner {kernel_version()}")
        raise typer.Exit()


def make_app(plugins: Plugins | None = None) -> typer.Typer:
    """The CLI around `plugins` (default: everything installed)."""
    from astuner.companions import COMPANION_ARGS, companions_help
    from astuner.lifecycle import Runs
    from astuner.plugins import Plugins

    plugins = plugins if plugins is not None else Plugins()
    app = typer.Typer(
        name="astuner",
        help="Train LLM agents with reinforcement learning.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        # Plain click help: typer's rich panels print a type for every flag ("--with-ray <bool>").
        rich_markup_mode=None,
    )

    @app.callback()
    def root(
        verbose: Annotated[
            bool, typer.Option("--verbose", "-v", help="Show tracebacks and debug logs.")
        ] = False,
        version: Annotated[
            bool,
            typer.Option(
                "--version", help="Print the version and exit.", is_eager=True, callback=_print_version
            ),
        ] = False,
    ) -> None:
        """Train LLM agents with reinforcement learning."""
        _State.verbose = _State.verbose or verbose

    @app.command(context_settings=COMPANION_ARGS, epilog=companions_help(plugins))
    @handle_user_errors
    def run(
        ctx: typer.Context,
        conf: ConfOption,
        backbone: BackboneOption = None,
        override: OverrideOption = None,
        with_logview: Annotated[
            bool,
            typer.Option(
                "--with-logview", help="Serve the log viewer on this run's folder (plugin astuner-logview)."
            ),
        ] = False,
        keep_logview: Annotated[
            bool, typer.Option("--keep-logview", help="Keep the viewer serving after the run, until Ctrl-C.")
        ] = False,
        logview_port: Annotated[
            int, typer.Option("--logview-port", help="Port of the log viewer (0 picks a free one).")
        ] = 8181,
        with_ray: Annotated[
            bool,
            typer.Option("--with-ray", help="Start a private Ray head for this run and stop it at exit."),
        ] = False,
        db: Annotated[
            str | None,
            typer.Option(
                "--db",
                metavar="TAG1|TAG2",
                help="Enable these breakpoint tags: bp('TAG1') in your code stops there (pdb in this "
                "terminal; Ray's distributed debugger in Ray workers).",
            ),
        ] = None,
    ) -> None:
        """Run (and train) with a config: rollouts, judging, updates."""
        from astuner.breakpoints import enable_tags
        from astuner.companions import companion_requests, log_viewer, serving_page
        from astuner.components import build_companion
        from astuner.launch import prepare_run

        companions = companion_requests(ctx.args, plugins)
        if db:
            tags = enable_tags(db)
            typer.echo(
                f"breakpoint tags enabled: {', '.join(sorted(tags))} (bp('TAG') stops there)", err=True
            )
        viewer_companion = log_viewer(plugins) if with_logview or keep_logview else None
        config = _load(plugins, conf, override, backbone)
        prepared = prepare_run(config, plugins, verbose=_State.verbose, companions=companions)
        with ExitStack() as stack:
            viewer = None
            if viewer_companion is not None:
                page = serving_page(
                    viewer_companion,
                    str(logview_port),
                    lambda reg, value: build_companion(config, plugins, reg, value, prepared.experiment.path),
                )
                try:
                    viewer = stack.enter_context(page)
                except BaseException as exc:
                    prepared.lifecycle.abandon(exc)
                    raise
                typer.echo(f"log viewer: {viewer.url}")
            prepared.execute(with_ray=with_ray)
            if viewer is not None and keep_logview:
                typer.echo(f"run finished; the log viewer stays at {viewer.url} (Ctrl-C to stop)")
                viewer.wait()

    plugins_app = typer.Typer(help="Inspect installed plugins.", no_args_is_help=True)
    app.add_typer(plugins_app, name="plugins")

    @plugins_app.command("list")
    @handle_user_errors
    def plugins_list(
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    ) -> None:
        """Every plugin: distribution, version, hooks, what it provides, status."""
        import json

        from rich.markup import escape
        from rich.table import Table

        infos = plugins.infos()
        if as_json:
            typer.echo(json.dumps([info.as_dict() for info in infos], indent=2))
            return
        table = Table("name", "distribution", "version", "hooks", "provides", "status")
        for info in infos:
            status = "ok"
            if info.status != "ok":
                status = f"[red]{escape(info.status)}[/]: {escape(info.error or '')}"
            table.add_row(
                info.name,
                info.distribution or "-",
                info.version or "-",
                "\n".join(info.hooks),
                "\n".join(info.provides),
                status,
            )
        _console().print(table)

    config_app = typer.Typer(help="Inspect configuration.", no_args_is_help=True)
    app.add_typer(config_app, name="config")

    @config_app.command("show")
    @handle_user_errors
    def config_show(
        conf: ConfOption, backbone: BackboneOption = None, override: OverrideOption = None
    ) -> None:
        """Print the resolved config, each value with its source (and the engine config, if any)."""
        import yaml

        from astuner.components import build_backbone
        from astuner.config_show import annotated_yaml
        from astuner.protocols import DescribesEngineConfig

        # Which keys a backbone ignores is news only when one was asked for.
        config = _load(plugins, conf, override, backbone, for_training=backbone is not None)
        typer.echo(annotated_yaml(config), nl=False)
        if backbone:
            runner = build_backbone(config, plugins)
            if isinstance(runner, DescribesEngineConfig):
                typer.echo(f"# engine config for backbone '{backbone}'")
                typer.echo(yaml.safe_dump(runner.engine_config(config, plugins), sort_keys=False), nl=False)

    data_app = typer.Typer(help="Look at task sets.", no_args_is_help=True)
    app.add_typer(data_app, name="data")

    @data_app.command("preview")
    @handle_user_errors
    def data_preview(
        conf: ConfOption,
        split: Annotated[str, typer.Option(help="train or validation.")] = "train",
        n: Annotated[int, typer.Option("-n", help="How many tasks.")] = 5,
        override: OverrideOption = None,
    ) -> None:
        """Show the first tasks the configured reader yields."""
        import itertools

        from rich.table import Table

        from astuner.components import build_reader

        if split not in ("train", "validation"):
            raise AstunerError(f"--split must be 'train' or 'validation', not '{split}'.")
        config = _load(plugins, conf, override, None, for_training=False)
        reader = build_reader(config, plugins)
        tasks = list(itertools.islice(reader.read(split), n))  # type: ignore[arg-type]
        table = Table("task_id", "query", "answer", title=f"{config.task_reader.type} · {split}")
        for task in tasks:
            table.add_row(task.task_id, task.main_query, str(task.answer) if task.answer is not None else "")
        _console().print(table)
        if not tasks:
            typer.echo(f"(the {split} split is empty)")

    plugins.call_register_commands(app, Runs(plugins, verbose=is_verbose))
    _name_missing_commands(app)
    return app


def _name_missing_commands(app: typer.Typer) -> None:
    """A hidden `astuner NAME` for each command of this repository's plugins that none registered.

    Typed without its plugin, such a command then names the plugin to install
    (`install_hint`) instead of click's bare "No such command".
    """
    from astuner.companions import COMPANION_ARGS
    from astuner.plugins import MOVED_OUT, command_names

    taken = command_names(app)
    for kind, name in MOVED_OUT:
        if kind != "command" or name in taken:
            continue
        *groups, leaf = name.split()  # `data download`: under the kernel's own `data` group
        parent = _group(app, groups)
        if parent is not None:
            settings = {**COMPANION_ARGS, "help_option_names": []}
            parent.command(leaf, hidden=True, context_settings=settings)(_not_installed(name))


def _group(app: typer.Typer, path: list[str]) -> typer.Typer | None:
    """The sub-app at `path` (`["data"]`: `astuner data`), or None if there is none."""
    for name in path:
        found = [g.typer_instance for g in app.registered_groups if g.name == name and g.typer_instance]
        if not found:
            return None
        app = found[0]
    return app


def _not_installed(name: str) -> Callable[[], None]:
    @handle_user_errors
    def command() -> None:
        from astuner.plugins import install_hint

        raise AstunerError(
            f"{install_hint('command', name)} If it is installed, `astuner plugins list` shows why it "
            "did not load."
        )

    return command


_ROOT_FLAGS = ("--help", "-h", "--version", "--verbose", "-v")


def normalise_argv(argv: list[str]) -> list[str]:
    """Accept the seeds' launcher spelling, `astuner [--with-appworld] --conf X --backbone debug`,
    as `astuner run ...`: options first, a `--conf` among them, and no sub-command."""
    if not argv or not argv[0].startswith("-") or argv[0] in _ROOT_FLAGS:
        return argv
    if any(a in ("--conf", "-c") or a.startswith("--conf=") for a in argv):
        return ["run", *argv]
    return argv


def asks_version(argv: list[str]) -> bool:
    """Whether the command line asks for `--version` before anything else is done.

    As click would: among the root flags that open the line, `--version`
    comes before `--help`. `main` answers it then without building the app.
    """
    for arg in argv:
        if arg not in _ROOT_FLAGS or arg in ("--help", "-h"):
            return False
        if arg == "--version":
            return True
    return False


def main() -> None:
    """The `astuner` command: answers `--version` at once, else builds the app with every installed plugin."""
    argv = sys.argv[1:]
    if asks_version(argv):
        print(f"astuner {kernel_version()}")
        return
    from astuner.logs import configure_logging
    from astuner.rollout.watchdog import own_stop_signals

    if "--verbose" in argv or "-v" in argv:
        _State.verbose = True
        argv = [a for a in argv if a not in ("--verbose", "-v")]
    configure_logging(verbose=_State.verbose)
    # This process is astuner's own: Ctrl-C and SIGTERM stop a run even when a workflow blocks its loop.
    own_stop_signals()
    app = make_app()
    app(args=normalise_argv(argv), prog_name="astuner")
