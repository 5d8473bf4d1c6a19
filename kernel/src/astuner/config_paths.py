"""Relative paths in a config: a config file's are taken from its folder, everything else's from the cwd.

A config file travels with the data beside it (`data/train.jsonl` next to
`conf.yaml`), so a relative path written in the file means "beside the
file", wherever the command is started; import strings are looked up there
too (`AstunerConfig.search_paths`). A path given on the command line (`-o`),
in the environment or to `astuner.tune()` in Python is what its user typed
where they stand, so it stays relative to the working directory.

A resolved path remembers what was written and where it was taken from, so
that a missing file's error can say both, and the absolute path looked at.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from astuner.config import AstunerConfig


class ConfigPath(type(Path())):  # type: ignore[misc]
    """An absolute path read from a config, with the text written there and the folder it was taken from."""

    written: str | None = None
    base: Path | None = None

    @classmethod
    def of(cls, written: str | Path, base: Path) -> ConfigPath:
        """`written` taken from `base` (kept as is when absolute or `~`-relative)."""
        path = cls(base / Path(written).expanduser())
        path.written = str(written)
        path.base = base
        return path

    def describe(self) -> str:
        """`'data/train.jsonl' (relative to /x/cfg/)`, or just the quoted path when it was absolute."""
        written = self.written if self.written is not None else str(self)
        if self.base is None or Path(written).expanduser().is_absolute():
            return f"'{written}'"
        return f"'{written}' (relative to {self.base}{'' if str(self.base).endswith('/') else '/'})"


def base_for(config: AstunerConfig, dotted: str) -> Path:
    """The folder a relative path at `dotted` is taken from: the config file's, if the file set it."""
    origins = config.origins
    if config.source is not None and origins is not None and origins.layer_of(dotted) == "file":
        return config.source.resolve().parent
    return Path.cwd()


def resolve(config: AstunerConfig, dotted: str, written: str | Path) -> ConfigPath:
    """The path at `dotted`, as written, taken from `base_for(config, dotted)`."""
    return ConfigPath.of(written, base_for(config, dotted))


# `Field(json_schema_extra=LOCAL_OR_HUB)`: a plugin's `str` key that names a local path or a hub id.
LOCAL_OR_HUB = {"astuner_path": "local path or hub id"}


def resolve_settings(config: AstunerConfig, settings: BaseModel, prefix: str) -> BaseModel:
    """`settings` (a plugin's block at `prefix`) with its path fields resolved.

    A plugin declares a file key by typing it `Path` (resolved by `resolve`);
    a `str` key that may also be a hub id carries `LOCAL_OR_HUB`'s marker and
    is made absolute only where the config file set it to a local path
    (`resolve_local`).
    """
    update: dict[str, Any] = {}
    for name, field in type(settings).model_fields.items():
        value, dotted = getattr(settings, name), f"{prefix}.{name}"
        if isinstance(value, Path) and not isinstance(value, ConfigPath):
            update[name] = resolve(config, dotted, value)
        elif (
            isinstance(value, str)
            and field.json_schema_extra == LOCAL_OR_HUB
            and base_for(config, dotted) != Path.cwd()
        ):
            update[name] = resolve_local(config, dotted, value)
    return settings.model_copy(update=update) if update else settings


def resolve_local(config: AstunerConfig, dotted: str, written: str) -> str:
    """A value that is a local path or a hub id / name: made absolute where it names a local path.

    It is local when it starts like a path (`/`, `.`, `~`) or exists beside
    its base; `org/name` that exists nowhere there stays as written, a hub id.
    """
    if not written or ":" in written.split("/", 1)[0]:
        return written  # empty, builtin:<name>, a URL
    path = resolve(config, dotted, written)
    if written.startswith((".", "~", "/")) or path.exists():
        return str(path)
    return written


def missing_message(key: str, path: Path | str, what: str = "file") -> str:
    """`key: file 'data/x' (relative to /cfg/) does not exist: looked at /cfg/data/x`."""
    if isinstance(path, ConfigPath):
        shown = path.describe()
    elif Path(path).expanduser().is_absolute():
        shown = f"'{path}'"
    else:
        shown = f"'{path}' (relative to the working directory, {Path.cwd()})"
    looked = os.path.normpath(Path(path).expanduser().absolute())
    return f"{key}: {what} {shown} does not exist: looked at {looked}"
