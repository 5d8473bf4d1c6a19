"""Which folder is a run's newest checkpoint: the backbone that wrote it says (`FindsCheckpoints`).

A run's closing lines and `tune()`'s result ask it here; `astuner eval
--checkpoint latest` (plugin astuner-eval) asks it for each run of an
experiment.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from astuner.protocols import FindsCheckpoints


def checkpoint_of(backbone: object, runs: Iterable[Path]) -> Path | None:
    """The newest checkpoint `backbone` wrote in `runs`, asked of the backbone (`FindsCheckpoints`).

    None when there is none, or the backbone cannot say where its checkpoints are.
    """
    return backbone.latest_checkpoint(runs) if isinstance(backbone, FindsCheckpoints) else None
