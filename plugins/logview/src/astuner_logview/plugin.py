"""Entry point of `astuner-logview`: command `astuner logview [PATH]` and companion `logview`.

The command serves the viewer until Ctrl-C; the companion serves one run's
folder while `astuner run --with-logview` runs it. Importing this module is
cheap: the server (fastapi, uvicorn) loads when a viewer starts.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from astuner.api import AstunerError, Register, hookimpl

if TYPE_CHECKING:
    from astuner_logview.server import LogviewServer

TOKEN_ENV = "ASTUNER_LOGVIEW_TOKEN"


def logview(
    path: Annotated[
        Path, typer.Argument(help="A record root, one experiment folder, or one run folder.")
    ] = Path("launcher_record"),
    port: Annotated[int, typer.Option(help="Port to serve on (0 picks a free one).")] = 8181,
    host: Annotated[
        str,
        typer.Option(
            help="Address to bind; anything but 127.0.0.1 exposes your logs to the network "
            "(then an access token is always required)."
        ),
    ] = "127.0.0.1",
    tokenizer: Annotated[
        str | None,
        typer.Option(help="Tokenizer folder or name for decoding tokens (default: each run's model.path)."),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            envvar=TOKEN_ENV,
            show_envvar=True,
            help=f"Access token every request must bring (?token=, then a cookie; or Authorization: Bearer). "
            f"Also read from {TOKEN_ENV}. Not needed on 127.0.0.1; on any other --host a random one is "
            "made when none is given.",
        ),
    ] = None,
) -> None:
    """Browse rollouts: runs, trajectories, every token's loss mask and log-prob, metrics."""
    from astuner_logview.access import is_loopback
    from astuner_logview.server import runs_found, start_logview

    try:
        viewer = start_logview(path, host=host, port=port, tokenizer=tokenizer, token=token or None)
    except AstunerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    found = runs_found(path)
    typer.echo(f"astuner logview: {found} run(s) under {viewer.root}")
    if found == 0:
        typer.echo("  (none yet: a run folder holds config.yaml or rollouts/; the list refreshes on reload)")
    if not is_loopback(host):
        typer.echo(
            f"  warning: bound to {host}; anyone who can reach this address and has the token "
            "can read these logs"
        )
    if viewer.token:
        origin = "given" if token else f"new and random (choose one with --token or {TOKEN_ENV})"
        typer.echo(
            f"  access token: {origin}; the link below carries it, "
            "scripts may send `Authorization: Bearer <token>` instead"
        )
    typer.echo(f"  open {viewer.url}   (Ctrl-C to stop)")
    viewer.wait()


@contextmanager
def serve_run(value: str | None, run_folder: Path) -> Iterator[LogviewServer]:
    """Companion `logview`: the viewer on the run's folder while the run lasts; `value` is the port."""
    from astuner_logview.server import DEFAULT_PORT, start_logview

    if value is not None and not value.isdigit():
        raise AstunerError(
            f"The log viewer companion takes a port number (0 picks a free one), not '{value}'. "
            "Write --with-logview alone for port 8181, or give a number."
        )
    viewer = start_logview(run_folder, port=int(value) if value is not None else DEFAULT_PORT)
    try:
        yield viewer
    finally:
        viewer.stop()


@hookimpl
def register_commands(cli: typer.Typer) -> None:
    cli.command("logview")(logview)


@hookimpl
def register_companions(register: Register) -> None:
    register(
        "logview",
        serve_run,
        summary="the rollout log viewer on the run's folder (port 8181; run: --logview-port P, "
        "eval: --with-logview P).",
    )
