"""Command `astuner init NAME`: scaffold a project that runs with `--backbone debug` right away."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from astuner.cli import handle_user_errors
from astuner.hookspecs import hookimpl
from astuner.scaffold import TEMPLATES, missing_packages, scaffold

_TEMPLATE_HELP = "; ".join(f"{name}: {t.summary}" for name, t in TEMPLATES.items())


def shown(path: Path) -> str:
    """`path` relative to the working directory when it lies below it, else absolute."""
    absolute = path.resolve()
    try:
        return absolute.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(absolute)


@handle_user_errors
def init(
    name: Annotated[str, typer.Argument(help="Project name: a folder NAME/ with NAME.yaml inside.")],
    template: Annotated[str, typer.Option("--template", "-t", help=_TEMPLATE_HELP)] = "math",
    parent: Annotated[
        Path, typer.Option("--dir", help="Folder to create NAME/ in (made if missing).")
    ] = Path("."),
) -> None:
    """Create a project: a config, a workflow (your agent), a judge and a README."""
    written = scaffold(name, template, parent)
    folder = written[0].parent
    typer.echo(f"Created {shown(folder)}/ from the '{template}' template:")
    for path in written:
        typer.echo(f"  {shown(path)}")
    missing = missing_packages(template)
    if missing:
        typer.echo(f"It needs: pip install {' '.join(shlex.quote(p) for p in missing)}")
    conf = shown(folder / f"{name}.yaml")
    flags = TEMPLATES[template].run_flags
    typer.echo("Next steps:")
    typer.echo(f"  astuner run --conf {conf} --backbone debug{flags}    # a few tasks, no training")
    typer.echo(f"  astuner run --conf {conf} --backbone torch{flags}    # train")
    typer.echo(f"  astuner eval --conf {conf}{flags} --checkpoint <run>/checkpoints/step_<n>")
    typer.echo(f"  see {shown(folder / 'README.md')}")


@hookimpl
def register_commands(cli: typer.Typer) -> None:
    cli.command("init")(init)
