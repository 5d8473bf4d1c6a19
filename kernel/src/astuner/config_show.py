"""`astuner config show`: the resolved config as YAML, each value followed by where it came from.

The output stays valid YAML (the sources are comments), so it can be saved
and loaded as a config; the column tells a user which of their keys took
effect, which are defaults, and which were read from an old spelling.
"""

from __future__ import annotations

from typing import Any

import yaml

from astuner.config import AstunerConfig

_MAX_COLUMN = 64


def annotated_yaml(config: AstunerConfig) -> str:
    """`config.to_yaml_dict()` as block YAML with a `# source` comment on every value line."""
    rows: list[tuple[str, str | None]] = []
    for block, body in config.to_yaml_dict().items():
        rows.append((f"{block}:", None))
        prefix = "" if block == "astuner" else f"{block}."
        _rows(body, prefix, 1, config, rows)
    width = min(max(len(text) for text, origin in rows if origin is not None), _MAX_COLUMN)
    lines = [text if origin is None else f"{text.ljust(width)}  # {origin}" for text, origin in rows]
    return "\n".join(lines) + "\n"


def _rows(
    node: dict[str, Any], prefix: str, depth: int, config: AstunerConfig, rows: list[tuple[str, str | None]]
) -> None:
    indent = "  " * depth
    for key, value in node.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            rows.append((f"{indent}{_scalar(key)}:", None))
            _rows(value, f"{dotted}.", depth + 1, config, rows)
        else:
            origin = config.origins.origin_of(dotted) if config.origins is not None else "-"
            rows.append((f"{indent}{_scalar(key)}: {_scalar(value)}", origin))


def _scalar(value: Any) -> str:
    """One value in flow style on one line (lists as `[a, b]`)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30, allow_unicode=True)
    return text.removesuffix("\n").removesuffix("\n...").strip()
