"""The base of the objects `tune()` takes: strict arguments, readable errors, config values.

Each object stands for a few config keys. Its fields are validated when it
is built, so a typo or a bad value fails where it was written, with one
paragraph naming the class, the argument and the fix, like every other
astuner error. `tune()` turns an object into config values twice: all of
its fields (its defaults, laid under `config_path`'s file) and only the
fields given explicitly (laid over it).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from astuner.errors import ConfigError
from astuner.translation import nest


class TunerSettings(BaseModel):
    """A `tune()` argument object; unknown arguments are errors."""

    model_config = ConfigDict(extra="forbid")

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(explain(type(self), exc)) from None

    def config_values(self, keys: Mapping[str, str], *, explicit: bool) -> dict[str, Any]:
        """Nested config values of the fields in `keys` (field -> dotted key): all, or those given."""
        names = self.model_fields_set if explicit else set(type(self).model_fields)
        return nest({key: self.config_value(name) for name, key in keys.items() if name in names})

    def config_value(self, name: str) -> Any:
        """The config value of field `name` (subclasses translate where the names differ)."""
        return getattr(self, name)


def explain(cls: type[BaseModel], exc: ValidationError) -> str:
    """One paragraph for every problem of the arguments given to `cls`."""
    fields = list(cls.model_fields)
    problems = []
    for error in exc.errors():
        name = ".".join(str(part) for part in error["loc"])
        if error["type"] == "extra_forbidden":
            near = difflib.get_close_matches(name, fields, n=1, cutoff=0.5)
            hint = f" Did you mean '{near[0]}'?" if near else ""
            problems.append(
                f"{cls.__name__} has no argument '{name}'.{hint} Its arguments: {', '.join(fields)}."
            )
        elif error["type"] == "missing":
            problems.append(f"{cls.__name__} needs the argument '{name}'.")
        else:
            problems.append(f"{cls.__name__}({name}={error['input']!r}): {error['msg']}.")
    return " ".join(problems)
