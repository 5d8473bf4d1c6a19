"""Turn pydantic validation errors into one paragraph a user can act on.

Each problem names the dotted key, where the value came from (file and
line, environment variable, or `-o` override) and, for an unknown key, the
nearest valid one.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, get_origin

import yaml
from pydantic import BaseModel, ValidationError


def explain_validation_error(
    exc: ValidationError,
    model: type[BaseModel],
    source: Path | None,
    env_data: dict[str, Any],
    override_data: dict[str, Any],
    prefix: str = "",
    arguments: dict[str, Any] | None = None,
) -> str:
    """One readable paragraph for every error in `exc`."""
    problems = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        key = ".".join([prefix, *loc] if prefix else loc)
        origin = describe_origin(
            [*prefix.split("."), *loc] if prefix else loc, source, env_data, override_data, arguments
        )
        if error["type"] == "extra_forbidden":
            near = nearest_key(model, loc)
            hint = f" Did you mean '{near}'?" if near else ""
            problems.append(f"Unknown key '{key}' in {origin}.{hint}")
        elif error["type"] == "missing":
            problems.append(f"Missing required key '{key}' in {origin}.")
        else:
            problems.append(
                f"Invalid value for '{key}' in {origin}: {error['msg']} (got {error['input']!r})."
            )
    return " ".join(problems)


def describe_origin(
    loc: list[str],
    source: Path | None,
    env_data: dict[str, Any],
    override_data: dict[str, Any],
    arguments: dict[str, Any] | None = None,
) -> str:
    """Where the value at `loc` came from, in words."""
    if _has_path(override_data, loc):
        return f"the command line (-o {'.'.join(loc)}=...)"
    if arguments and _has_path(arguments, loc):
        return f"the arguments of astuner.tune() ({'.'.join(loc)})"
    if _has_path(env_data, loc):
        return "environment variable ASTUNER__" + "__".join(part.upper() for part in loc)
    if source is None:
        return "the configuration"
    line = yaml_line(source, ["astuner", *loc]) or yaml_line(source, loc)
    return f"config file '{source}'" + (f" (line {line})" if line else "")


def nearest_key(model: type[BaseModel], loc: list[str]) -> str | None:
    """The closest valid key to the last element of `loc`, as a dotted path."""
    parent: Any = model
    keyed = False  # the previous part was a mapping of models: this part is one of its keys
    for part in loc[:-1]:
        if keyed:
            keyed = False
            continue
        fields = getattr(parent, "model_fields", {})
        if part not in fields:
            return None
        annotation = fields[part].annotation
        parent = _model_of(annotation)
        if parent is None:
            return None
        keyed = get_origin(annotation) is dict
    names = list(getattr(parent, "model_fields", {}))
    near = difflib.get_close_matches(loc[-1], names, n=1, cutoff=0.5)
    if not near:
        return None
    return ".".join([*loc[:-1], near[0]])


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _has_path(data: dict[str, Any], loc: list[str]) -> bool:
    node: Any = data
    for part in loc:
        if not isinstance(node, dict):
            return False
        matches = [k for k in node if str(k).lower() == part.lower()]
        if not matches:
            return False
        node = node[matches[0]]
    return True


def yaml_line(path: Path, keys: list[str]) -> int | None:
    """1-based line of the deepest existing key along `keys` in a YAML file, if found."""
    try:
        node = yaml.compose(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    line = None
    for key in keys:
        if not isinstance(node, yaml.MappingNode):
            break
        for key_node, value_node in node.value:
            if key_node.value == key:
                line = key_node.start_mark.line + 1
                node = value_node
                break
        else:
            return line if key != keys[0] else None
    return line
