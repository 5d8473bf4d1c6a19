"""Throwaway plugin packages written to disk, for tests that install a plugin as a user would."""

from __future__ import annotations

import textwrap
from pathlib import Path


def plugin_package(
    root: Path, dist: str, module: str, source: str, *, version: str = "0.1.0", entry: str | None = None
) -> Path:
    """Write `root/dist`: a hatchling package of one module, `module/__init__.py` holding `source`.

    Its `astuner` entry point is named `entry` (default: the module's name),
    so `pip install` of the folder makes the kernel find the plugin.
    """
    folder = root / dist
    (folder / module).mkdir(parents=True)
    (folder / module / "__init__.py").write_text(textwrap.dedent(source))
    (folder / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""
            [build-system]
            requires = ["hatchling"]
            build-backend = "hatchling.build"

            [project]
            name = "{dist}"
            version = "{version}"

            [project.entry-points.astuner]
            {entry or module} = "{module}"

            [tool.hatch.build.targets.wheel]
            packages = ["{module}"]
            """
        )
    )
    return folder
