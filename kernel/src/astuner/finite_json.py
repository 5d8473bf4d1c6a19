"""JSON has no spelling for NaN or infinity: values that are not finite are written as null.

`json.dumps` would write the literals `NaN` and `Infinity`, which strict
readers (JavaScript's JSON.parse, jq) refuse. Used by the records writer
(`astuner.record.strict_json`) and the run's JSON log lines.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def finite(value: Any, key: str = "", replaced: dict[str, float] | None = None) -> Any:
    """`value` with every float that is not finite replaced by None.

    Each one replaced is noted in `replaced` by its key path (`metrics.reward/mean`).
    """
    if isinstance(value, float) and not math.isfinite(value):
        if replaced is not None:
            replaced[key or "value"] = value
        return None
    if isinstance(value, Mapping):
        return {k: finite(v, f"{key}.{k}" if key else str(k), replaced) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v, key, replaced) for v in value]
    return value
