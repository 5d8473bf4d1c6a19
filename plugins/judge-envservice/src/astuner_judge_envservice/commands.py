"""`astuner envservice serve`: run the reference EnvService.

Prints `Starting server on http://HOST:PORT` once it listens (the line the
seeds' launcher waits for); `GET /healthz` answers "OK" from then on.
"""

from __future__ import annotations

from typing import Annotated

import typer

from astuner.api import AstunerError

envservice_app = typer.Typer(
    help="The reference environment service (EnvService protocol).", no_args_is_help=True
)


@envservice_app.command("serve")
def serve(
    env: Annotated[
        list[str],
        typer.Option("--env", "-e", help="Environment to serve (repeatable): guess_number, countdown."),
    ],
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    host: Annotated[
        str, typer.Option(help="Address to bind; 127.0.0.1 keeps it on this machine.")
    ] = "127.0.0.1",
    max_instances: Annotated[
        int, typer.Option(help="Live instances at most; /create answers 503 beyond.")
    ] = 1024,
    idle_timeout: Annotated[
        float, typer.Option(help="Seconds without requests before an instance expires.")
    ] = 3600.0,
    step_delay: Annotated[
        float,
        typer.Option(
            help="Seconds every /step waits before acting, without blocking other requests "
            "(a slow environment, e.g. for bench/bench_async.py)."
        ),
    ] = 0.0,
) -> None:
    """Serve text environments over the EnvService protocol."""
    import uvicorn

    from astuner_judge_envservice.server import GAMES, create_app

    unknown = [name for name in env if name not in GAMES]
    if unknown:
        typer.echo(
            f"error: unknown environment {', '.join(unknown)} for --env; the reference server has "
            f"{', '.join(GAMES)}.",
            err=True,
        )
        raise typer.Exit(2)
    if max_instances < 1 or idle_timeout <= 0 or step_delay < 0:
        raise AstunerError(
            "--max-instances must be at least 1, --idle-timeout positive and --step-delay at least 0."
        )
    app = create_app(
        {name: GAMES[name]() for name in env},
        max_instances=max_instances,
        idle_timeout=idle_timeout,
        step_delay=step_delay,
    )
    delay = f", {step_delay:g} s per step" if step_delay else ""
    typer.echo(f"Starting server on http://{host}:{port} (environments: {', '.join(env)}{delay})")
    uvicorn.run(app, host=host, port=port, log_level="warning")
