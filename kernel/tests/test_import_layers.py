"""The kernel's modules import each other in layers, without circles.

An AST scan of `kernel/src/astuner/**/*.py` (the scaffold's `templates/`
are file templates, not modules) collects every import of a kernel module:
at module level and inside functions alike, plus
`importlib.import_module("astuner...")` with a literal name. Imports under
`if TYPE_CHECKING:` do not count: they never run. `from package import
name` is an edge to `package.name` when that is a module, else to the
package; importing a submodule does not count as importing its parents
(a package `__init__` that gathers its submodules is no circle).

Why: a circle means no module in it can be understood, tested or loaded
without all the others, and a call-time import inside one hides the same
knot from the import system until a command trips over it.

The layers, bottom up:

- base modules (`BASE`): errors, logging and its JSON encoding, the disk
  cache. Each imports only other base modules.
- the token core (`astuner.core.*`): the trajectory data model, context
  tracking, merging, advantages and the engine's value types
  (`core.generation`). It imports only the core and base modules, so every
  backbone can build on it without pulling in the rollout layer.
- the contracts (`astuner.protocols`, `astuner.hookspecs`): what plugins and
  the kernel promise each other. They import only the core and base
  modules (the rest only under `TYPE_CHECKING`), never the runner, the
  rollout stack or the run's lifecycle that implement them.
"""

from __future__ import annotations

import ast
import itertools
from collections import deque
from pathlib import Path

import astuner

SRC = Path(astuner.__file__).resolve().parent
BASE = frozenset({"astuner.errors", "astuner.logs", "astuner.finite_json", "astuner.cache"})
CORE = "astuner.core"
CONTRACTS = ("astuner.protocols", "astuner.hookspecs")

Edges = dict[str, dict[str, int]]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def kernel_modules() -> dict[str, Path]:
    """Every kernel module's dotted name -> its file."""
    return {
        _module_name(path): path
        for path in sorted(SRC.rglob("*.py"))
        if "templates" not in path.relative_to(SRC).parts
    }


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def imported_names(tree: ast.Module, module: str, is_package: bool) -> list[tuple[str, int]]:
    """The dotted names a module imports when it runs (and the line of each), TYPE_CHECKING blocks
    left out."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join([*package, base] if base else package)
            found.extend((f"{base}.{alias.name}", node.lineno) for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.args[0].value, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> Edges:
    """Kernel module -> the kernel modules it imports when it runs -> the line of the first such import."""
    modules = kernel_modules()

    def resolve(name: str) -> str | None:
        parts = name.split(".")
        while parts:
            if ".".join(parts) in modules:
                return ".".join(parts)
            parts.pop()
        return None

    graph: Edges = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph[module] = {}
        for name, line in imported_names(tree, module, path.name == "__init__.py"):
            target = resolve(name)
            if target is not None and target != module:
                graph[module].setdefault(target, line)
    return graph


def strongly_connected(graph: Edges) -> list[list[str]]:
    """The groups of modules that reach one another (Tarjan), those of two or more only."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return groups


def shortest_cycle(graph: Edges, group: list[str]) -> list[str]:
    """A shortest circle through the group's first module, start repeated at the end."""
    start = group[0]
    members = set(group)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target in sorted(graph[node]):
            if target not in members:
                continue
            if target == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if target not in came_from:
                came_from[target] = node
                queue.append(target)
    raise AssertionError(f"{group} is not strongly connected")


def describe(graph: Edges, cycle: list[str]) -> str:
    """`a -> b (a:12) -> a (b:30)`: each step with the line of `a` that imports `b`."""
    steps = [cycle[0]]
    for source, target in itertools.pairwise(cycle):
        steps.append(f"{target} ({source}:{graph[source][target]})")
    return " -> ".join(steps)


def test_the_scan_sees_imports_the_way_python_runs_them() -> None:
    source = """
from typing import TYPE_CHECKING
import astuner.errors
from astuner.core import trajectory
from . import logs
if TYPE_CHECKING:
    from astuner.rollout.runner import RolloutRunner
else:
    import astuner.cache
def later():
    from astuner.lifecycle import Runs
    importlib.import_module("astuner.record")
"""
    names = [name for name, _ in imported_names(ast.parse(source), "astuner.core.example", False)]
    assert names == [
        "typing.TYPE_CHECKING",
        "astuner.errors",
        "astuner.core.trajectory",
        "astuner.core.logs",
        "astuner.cache",
        "astuner.lifecycle.Runs",
        "astuner.record",
    ]


def test_a_circle_is_found_and_told_as_a_chain() -> None:
    graph: Edges = {"a": {"b": 3}, "b": {"c": 5}, "c": {"a": 7, "d": 1}, "d": {}}
    groups = strongly_connected(graph)
    assert groups == [["a", "b", "c"]]
    assert describe(graph, shortest_cycle(graph, groups[0])) == "a -> b (a:3) -> c (b:5) -> a (c:7)"


def test_the_graph_covers_the_kernel() -> None:
    graph = import_graph()
    assert "astuner.core.tracker" in graph
    assert "astuner.core.trajectory" in graph["astuner.core.tracker"]
    assert not any(module.startswith("astuner.templates") for module in graph)


def test_no_kernel_modules_import_each_other_in_a_circle() -> None:
    graph = import_graph()
    circles = [
        f"{describe(graph, shortest_cycle(graph, group))}\n  (all of {', '.join(group)} reach one another)"
        for group in strongly_connected(graph)
    ]
    assert not circles, "Import circles among kernel modules:\n" + "\n".join(circles)


def _imports_outside(graph: Edges, module: str, allowed: tuple[str, ...]) -> list[str]:
    return [
        f"{module}:{line} imports {target}"
        for target, line in sorted(graph[module].items())
        if target not in BASE and not any(target == a or target.startswith(a + ".") for a in allowed)
    ]


def test_base_modules_import_only_each_other() -> None:
    graph = import_graph()
    wrong = [line for module in sorted(BASE) for line in _imports_outside(graph, module, ())]
    assert not wrong, "\n".join(wrong)


def test_the_token_core_imports_nothing_above_it() -> None:
    graph = import_graph()
    core = [module for module in graph if module == CORE or module.startswith(CORE + ".")]
    wrong = [line for module in sorted(core) for line in _imports_outside(graph, module, (CORE,))]
    assert not wrong, "\n".join(wrong)


def test_the_contracts_import_only_the_core() -> None:
    graph = import_graph()
    wrong = [line for module in CONTRACTS for line in _imports_outside(graph, module, (CORE,))]
    assert not wrong, "\n".join(wrong)
