"""Plugins import the kernel only through its two public modules, which stay small, cheap and documented.

`astuner.api` serves extension plugins (readers, judges, engines, notifiers,
tools, the log viewer: the "leaf" plugins, which import nothing else);
`astuner.training` serves the few that compose a training step (backbones,
executors, commands that run rollouts). An AST scan of every
`plugins/*/src/**/*.py` reports each import of another kernel module (at
module level, inside functions and under `if TYPE_CHECKING:` alike, plus
`importlib.import_module("astuner...")`) and each import of another plugin's
package. The docs pages are generated from the docstrings of both modules'
`__all__`, so every class and function there must have its own.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

import astuner
import astuner.api
import astuner.training

PLUGINS = Path(astuner.__file__).resolve().parents[3] / "plugins"
API = "astuner.api"
TRAINING = "astuner.training"
# Plugins that compose a training step or run rollouts themselves; every other plugin is a leaf.
COMPOSERS = {"backbone-torch", "backbone-verl", "backbone-trinity", "executor-ray", "eval"}
LEAVES = {
    "judge-math",
    "judge-envservice",
    "reader-hf",
    "engine-vllm",
    "engine-openai",
    "notify",
    "tools",
    "logview",
}
API_LIMIT = 40
# What a plugin author's first import must not pay for.
HEAVY = ("typer", "torch", "transformers", "fastapi", "uvicorn", "agentscope")


def plugin_packages() -> dict[str, str]:
    """Each plugin's import package -> its folder name under `plugins/`."""
    return {
        package.name: package.parents[1].name
        for package in sorted(PLUGINS.glob("*/src/*"))
        if (package / "__init__.py").is_file()
    }


def _kernel_module(module: str) -> bool:
    return module == "astuner" or module.startswith("astuner.")


def _imported_modules(node: ast.AST) -> list[str]:
    """The modules one node imports, with `from astuner import x` read as module `astuner.x`."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        if node.module == "astuner":
            return [f"astuner.{alias.name}" for alias in node.names]
        return [node.module]
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
            return [node.args[0].value]
    return []


def forbidden_imports(
    source: str, filename: str, own_package: str, packages: dict[str, str], public: tuple[str, ...] = (API,)
) -> list[str]:
    """`file:line: module (why)` for each import of a kernel module outside `public`, or of another plugin."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        for module in _imported_modules(node):
            top = module.split(".")[0]
            if _kernel_module(module) and module not in public:
                found.append((node.lineno, module, f"import it from {' or '.join(public)}"))
            elif top in packages and top != own_package:
                found.append((node.lineno, module, f"plugin {packages[top]}'s internals"))
    return [f"{filename}:{line}: {module} ({why})" for line, module, why in sorted(found)]


PROBE = """\
from typing import TYPE_CHECKING
import importlib
import astuner
import astuner.api
from astuner.api import Task
from astuner import api
from astuner import Task
import astuner.core.task
from astuner.rollout.engine import SamplingParams
from astuner_judge_math.rule_judge import MathAnswerJudge
from astuner_reader_hf import reader
if TYPE_CHECKING:
    from astuner.config import AstunerConfig
def build():
    from astuner.plugins import Plugins
    return importlib.import_module("astuner.components")
"""


def test_the_scan_reports_every_form_of_a_kernel_or_foreign_plugin_import() -> None:
    packages = {"astuner_judge_math": "judge-math", "astuner_reader_hf": "reader-hf"}
    found = forbidden_imports(PROBE, "probe.py", "astuner_reader_hf", packages)
    assert [line.split(" (")[0] for line in found] == [
        "probe.py:3: astuner",
        "probe.py:7: astuner.Task",
        "probe.py:8: astuner.core.task",
        "probe.py:9: astuner.rollout.engine",
        "probe.py:10: astuner_judge_math.rule_judge",
        "probe.py:13: astuner.config",
        "probe.py:15: astuner.plugins",
        "probe.py:16: astuner.components",
    ]


def test_the_scan_lets_a_composer_import_the_training_module_and_a_leaf_not() -> None:
    source = "from astuner.api import Task\nfrom astuner.training import RunContext\n"
    assert forbidden_imports(source, "p.py", "x", {}, public=(API, TRAINING)) == []
    assert forbidden_imports(source, "p.py", "x", {}) == [
        "p.py:2: astuner.training (import it from astuner.api)"
    ]


@pytest.mark.parametrize("package", sorted(plugin_packages()))
def test_a_plugin_imports_the_kernel_only_through_its_public_modules(package: str) -> None:
    packages = plugin_packages()
    folder = packages[package]
    public = (API, TRAINING) if folder in COMPOSERS else (API,)
    root = PLUGINS / folder / "src"
    found = [
        problem
        for path in sorted((root / package).rglob("*.py"))
        for problem in forbidden_imports(
            path.read_text(), str(path.relative_to(PLUGINS.parent)), package, packages, public
        )
    ]
    assert not found, (
        f"Plugin {folder} imports kernel internals or another plugin's modules; it may import only "
        f"{' and '.join(public)} from the kernel (add a missing name to its __all__):\n" + "\n".join(found)
    )


def test_every_plugin_folder_was_scanned_and_is_a_leaf_or_a_composer() -> None:
    folders = sorted(p.name for p in PLUGINS.iterdir() if (p / "src").is_dir())
    assert sorted(plugin_packages().values()) == folders
    assert sorted(LEAVES | COMPOSERS) == folders, "classify the new plugin as a leaf or a composer"
    assert not LEAVES & COMPOSERS


def test_the_plugin_api_stays_small() -> None:
    assert len(astuner.api.__all__) <= API_LIMIT, (
        f"astuner.api exports {len(astuner.api.__all__)} names (at most {API_LIMIT}): what only backbones, "
        f"executors or rollout-running commands need belongs in {TRAINING}"
    )
    assert not set(astuner.api.__all__) & set(astuner.training.__all__), "a name lives in one public module"


def _own_docstring(obj: object) -> str | None:
    """The object's own docstring; a dataclass's generated signature line does not count."""
    doc = obj.__doc__
    if dataclasses.is_dataclass(obj) and doc and doc.startswith(f"{obj.__name__}("):  # type: ignore[union-attr]
        return None
    return doc.strip() if doc else None


PUBLIC_NAMES = [(module, name) for module in (astuner.api, astuner.training) for name in module.__all__]


@pytest.mark.parametrize(("module", "name"), PUBLIC_NAMES, ids=[f"{m.__name__}.{n}" for m, n in PUBLIC_NAMES])
def test_every_exported_name_resolves_and_documents_itself(module: object, name: str) -> None:
    obj = getattr(module, name)
    if inspect.isclass(obj) or inspect.isroutine(obj):
        assert _own_docstring(obj), (
            f"{module.__name__} exports {name} ({obj.__module__}) without a docstring; the docs pages are "
            "generated from them: add one where it is defined."
        )


@pytest.mark.parametrize("module", [astuner.api, astuner.training], ids=lambda m: m.__name__)
def test_the_export_list_has_no_duplicates(module: object) -> None:
    assert len(module.__all__) == len(set(module.__all__))


def _loaded_after(statement: str) -> tuple[list[str], list[str]]:
    """(the heavy libraries, the astuner modules) a fresh interpreter has loaded after `statement`."""
    probe = (
        f"import sys, json; {statement}; "
        f"print(json.dumps([sorted(set({HEAVY!r}) & set(sys.modules)), "
        "sorted(m for m in sys.modules if m == 'astuner' or m.startswith('astuner.'))]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    heavy, kernel = json.loads(out)
    return heavy, kernel


@pytest.mark.parametrize("module", ["astuner.api", "astuner.hookspecs", "astuner.training"])
def test_importing_a_public_module_loads_no_heavy_library(module: str) -> None:
    """Every plugin's registration module imports one, so `astuner --help` and `plugins list` pay for it."""
    heavy, _ = _loaded_after(f"import {module}")
    assert heavy == [], f"import {module} loaded {heavy}: import them where they are used, or through _LAZY"


def test_the_hook_specifications_import_nothing_else_of_the_kernel() -> None:
    _, kernel = _loaded_after("import astuner.hookspecs")
    assert kernel == ["astuner", "astuner.hookspecs"]
