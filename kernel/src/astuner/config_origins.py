"""Where each value of a loaded config came from: the source column of `astuner config show`.

`load_config` reads a config in layers (defaults, file, environment,
`astuner.tune()` arguments, `-o` overrides, `--backbone`), each after
`astuner.compat` translated it; a `ConfigOrigins` keeps them to answer, for
any dotted key, which layer set it, at which line of the file, and under
which old spelling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ValidationError

from astuner import compat
from astuner.config_errors import describe_origin, explain_validation_error, yaml_line
from astuner.config_yaml import load_yaml
from astuner.errors import ConfigError

ENV_PREFIX = "ASTUNER__"
PASSTHROUGH_BLOCKS = ("verl", "trinity")


@dataclass
class Layer:
    """One source of config values, before or after `astuner.compat` translation."""

    kind: Literal["defaults", "file", "env", "arguments", "override", "backbone"]
    data: dict[str, Any]
    renamed: dict[str, str] = field(default_factory=dict)

    def describe(self, source: Path | None) -> str:
        return {
            "defaults": "astuner.tune() defaults",
            "file": f"config file '{source}'",
            "env": "the environment",
            "arguments": "astuner.tune() arguments",
            "override": "-o overrides",
            "backbone": "--backbone",
        }[self.kind]


@dataclass
class ConfigOrigins:
    """Where each value of a loaded config came from: the source column of `astuner config show`."""

    source: Path | None
    layers: list[Layer]
    computed: dict[str, str] = field(default_factory=dict)

    def explicit_keys(self) -> list[str]:
        """Dotted leaf keys a user set (file, environment, tune() arguments, -o), not defaults."""
        keys: set[str] = set()
        for layer in self.layers:
            if layer.kind != "defaults":
                keys.update(_leaf_keys(layer.data))
        return sorted(keys)

    def layer_of(self, dotted: str) -> str | None:
        """The kind of the highest layer that sets `dotted` (or the key above it, whole); None: default."""
        for layer in reversed(self.layers):
            if _deepest_prefix(layer.data, dotted) is not None:
                return layer.kind
        return None

    def origin_of(self, dotted: str) -> str:
        """`default`, `file x.yaml:12`, `env ASTUNER__A__B`, `-o a.b`, ...; an old spelling says so."""
        note = f" ({self.computed[dotted]})" if dotted in self.computed else ""
        for layer in reversed(self.layers):
            found = _deepest_prefix(layer.data, dotted)
            if found is None:
                continue
            old = layer.renamed.get(found)
            alias = f", alias of {old.rsplit(': ', 1)[-1]}" if old else ""
            return self._where(layer, found) + alias + note
        return "default" + note

    def describe(self, loc: list[str]) -> str:
        """Where the value at `loc` came from, in the words of an error message (-o, env, file line)."""
        return describe_origin(loc, self.source, *self._sources())

    def explain(self, exc: ValidationError, model: type[BaseModel], prefix: str) -> str:
        """`explain_validation_error` for a block validated after loading, e.g. a plugin's settings."""
        env, override, arguments = self._sources()
        return explain_validation_error(exc, model, self.source, env, override, prefix, arguments)

    def _sources(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """The environment, command-line (with --backbone) and tune() arguments layers."""
        data = {layer.kind: layer.data for layer in self.layers}
        command_line = {**data.get("override", {}), **data.get("backbone", {})}
        return data.get("env", {}), command_line, data.get("arguments", {})

    def _where(self, layer: Layer, dotted: str) -> str:
        if layer.kind == "file":
            old = layer.renamed.get(dotted)
            parts = (old.split(": ", 1)[0] if old else dotted).split(".")
            line = None
            if self.source is not None:
                roots = [None] if parts[0] in PASSTHROUGH_BLOCKS else []
                roots += [root for root in ("astuner", *compat.OLD_ROOTS) if _has_root(self.source, root)]
                for root in roots:
                    line = yaml_line(self.source, [root, *parts] if root else parts)
                    if line:
                        break
            name = self.source.name if self.source is not None else "file"
            return f"file {name}:{line}" if line else f"file {name}"
        if layer.kind == "env":
            old = layer.renamed.get(dotted, dotted)
            key = dotted if ": " in old else old  # an import-string alias keeps the key's own name
            return "env " + ENV_PREFIX + "__".join(part.upper() for part in key.split("."))
        return {
            "defaults": "tune() default",
            "arguments": "tune() argument",
            "override": f"-o {dotted}",
            "backbone": "--backbone",
        }[layer.kind]


def _leaf_keys(node: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key, value in node.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            keys += _leaf_keys(value, dotted + ".")
        else:
            keys.append(dotted)
    return keys


def _deepest_prefix(data: dict[str, Any], dotted: str) -> str | None:
    """`dotted` if the layer sets it, or the key above it that the layer sets whole (a list, a value)."""
    node: Any = data
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
        if not isinstance(node, dict) and i < len(parts) - 1:
            return ".".join(parts[: i + 1])
    return dotted


def _has_root(path: Path, root: str) -> bool:
    try:
        raw = load_yaml(path.read_text(encoding="utf-8"), f"Config file '{path}'")
    except (OSError, yaml.YAMLError, UnicodeDecodeError, ConfigError):
        return False
    return isinstance(raw, dict) and root in raw
