"""Reading a run's JSONL records in tests, as raw dicts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def rollout_rows(path: Path) -> list[dict[str, Any]]:
    """Every record of a JSONL file, one per line.

    Split on newlines only: `str.splitlines()` also splits at U+2028, U+0085
    and the other Unicode line breaks, which a model's text may contain and
    which JSON leaves unescaped inside strings.
    """
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]
