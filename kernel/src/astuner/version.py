"""The installed kernel's version, from its distribution's metadata.

A module of its own so that `astuner --version` answers with it before the
CLI loads the plugin manager, the config models or typer's app.
"""

from __future__ import annotations

import importlib.metadata


def kernel_version() -> str | None:
    """The `astuner` distribution's version, or None when the kernel runs from an uninstalled tree."""
    try:
        return importlib.metadata.version("astuner")
    except importlib.metadata.PackageNotFoundError:
        return None
