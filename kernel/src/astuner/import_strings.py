"""Import strings: `pkg.mod->Name` (the seeds' form) or `pkg.mod:Name`, resolved where a user expects.

A config may name a workflow, judge or reader by import string instead of a
registered name; `Plugins.get` hands such names here.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from astuner.errors import PluginError


def is_import_string(name: str) -> bool:
    """`pkg.mod->Name` (the seeds' form) or `pkg.mod:Name`."""
    return "->" in name or ":" in name


def resolve_import_string(spec: str, search_paths: Iterable[Path] = ()) -> Any:
    """Import the object an import string names, or explain why not.

    The module is looked up where a user expects: in each of `search_paths`
    in order (the working directory, then the config file's folder), then in
    the installed packages. A folder is put on `sys.path` only when it holds
    the module, so `math_agent/math_agent.yaml` beside `math_agent/math_agent.py`,
    run from the parent folder, finds `math_agent.math_agent` in the working
    directory instead of the config folder's `math_agent.py`.
    """
    module_name, sep, attr_path = spec.partition("->")
    if not sep:
        module_name, _, attr_path = spec.rpartition(":")
    module_name, attr_path = module_name.strip(), attr_path.strip()
    if not module_name or not attr_path:
        raise PluginError(
            f"'{spec}' is not a valid import string: write it as "
            "'package.module->Name' or 'package.module:Name'."
        )
    folders = list(dict.fromkeys(Path(p).resolve() for p in search_paths))
    home = next((folder for folder in folders if _holds_module(folder, module_name)), None)
    if home is not None:
        _put_first_on_path(home, module_name)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        library = _missing_library(exc, module_name)
        if library is not None:
            raise PluginError(
                f"Module '{module_name}' (from the import string '{spec}') imports '{library}', which is not "
                f"installed. {_install_line(library)}"
            ) from exc
        searched = "; ".join([*(str(f) for f in folders), "the installed packages"])
        found = f"It was found in {home}, but importing it failed. " if home is not None else ""
        raise PluginError(
            f"Cannot import module '{module_name}' from the import string '{spec}' "
            f"({type(exc).__name__}: {exc}). {found}Searched, in order: {searched}. Check the spelling, "
            "and run from the folder that holds the module or put it beside the config file."
        ) from exc
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n in dir(obj) if not n.startswith("_"))
            near = difflib.get_close_matches(part, public, n=1)
            hint = f" Did you mean '{near[0]}'?" if near else ""
            where = getattr(obj, "__file__", None) or module_name
            raise PluginError(
                f"'{module_name}' ({where}) has no attribute '{attr_path}' (from the import string "
                f"'{spec}').{hint}"
            )
        obj = getattr(obj, part)
    return obj


def _missing_library(exc: ImportError, module_name: str) -> str | None:
    """The top-level library the module imports that is not installed, or None.

    None when the named module itself (or its package) is what was not found:
    that is a spelling or working-directory matter, not a missing install.
    """
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if not missing or module_name == missing or module_name.startswith(f"{missing}."):
        return None
    return missing.split(".", 1)[0]


def _install_line(library: str) -> str:
    """How to install `library`: the kernel's extra that brings it (`astuner[agentscope]`), if one does."""
    wanted = _normalised(library)
    for requirement in importlib.metadata.requires("astuner") or []:
        name = re.match(r"[A-Za-z0-9._-]+", requirement)
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", requirement)
        if name and extra and _normalised(name.group()) == wanted:
            return f'Install it with `pip install "astuner[{extra.group(1)}]"`.'
    return "Install the package that provides it in this environment."


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _holds_module(folder: Path, module_name: str) -> bool:
    """Whether `folder` holds `a.b.c` as a.b.c.py / a/b/c/__init__.py, or its top-level package."""
    parts = module_name.split(".")
    path = folder.joinpath(*parts)
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file() or path.is_dir()


def _put_first_on_path(folder: Path, module_name: str) -> None:
    """`folder` first on `sys.path`; a same-named top-level module loaded from elsewhere is forgotten."""
    entry = str(folder)
    if entry in sys.path:
        sys.path.remove(entry)
    sys.path.insert(0, entry)
    top = module_name.split(".", 1)[0]
    loaded = sys.modules.get(top)
    if loaded is None:
        return
    locations = [getattr(loaded, "__file__", None), *list(getattr(loaded, "__path__", []) or [])]
    if not any(loc and Path(loc).resolve().is_relative_to(folder) for loc in locations):
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            del sys.modules[name]
