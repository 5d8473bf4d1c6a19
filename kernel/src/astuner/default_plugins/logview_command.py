"""Command `astuner logview [PATH]`: serve the rollout log viewer until Ctrl-C."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from astuner.errors import AstunerError
from astuner.hookspecs import hookimpl

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
    from astuner.logview.access import is_loopback
    from astuner.logview.server import runs_found, start_logview

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


@hookimpl
def register_commands(cli: typer.Typer) -> None:
    cli.command("logview")(logview)
