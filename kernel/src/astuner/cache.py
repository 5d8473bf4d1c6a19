"""astuner's on-disk cache of converted artefacts (tokenizers, dequantised models)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def cache_dir() -> Path:
    """Where astuner caches converted artefacts: `$ASTUNER_CACHE` or `~/.cache/astuner`."""
    root = os.environ.get("ASTUNER_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "astuner"


def build_once(target: Path, marker: str, build: Callable[[Path], None]) -> Path:
    """`target`, made by `build(folder)` unless `target / marker` already exists.

    The build writes into a private folder that is renamed into place, so a
    concurrent or interrupted build never leaves a half-written cache entry
    that looks complete.
    """
    if (target / marker).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(tmp)
        try:
            tmp.rename(target)
        except OSError:
            if not (target / marker).exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
