"""The kernel declares what it imports, and imports what it declares.

An AST scan of `kernel/src/astuner` collects the top-level module of every
`import` (those under `if TYPE_CHECKING:` are for type checkers only and do
not count); `importlib.metadata.packages_distributions()` maps each module
to its distribution. Every third-party one must be a declared dependency,
unless it is listed in `OPTIONAL` below, and an optional one must be
imported lazily (inside a function), so `import astuner...` works without it.
"""

from __future__ import annotations

import ast
import importlib.metadata
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import astuner

PACKAGE = Path(astuner.__file__).resolve().parent
PYPROJECT = PACKAGE.parents[1] / "pyproject.toml"  # kernel/pyproject.toml in a source checkout
PLUGINS = PACKAGE.parents[2] / "plugins"

# Scaffold templates are files `astuner init` writes into a user's project, not kernel code.
NOT_KERNEL_CODE = ("templates",)

# Module -> why the kernel may import it without declaring it as a dependency.
OPTIONAL = {
    "agentscope": "extra 'agentscope': imported only when a workflow uses AgentScope (agentscope_model.py)",
    "openai": "extra 'openai': ModelTuner.openai_client() imports it when used (agents on the OpenAI SDK)",
    "torch": "astuner.testing.models only: random models for tests, built where torch is installed",
    "pytest": "extra 'testing': astuner.testing.pytest_plugin, which only pytest loads",
}

# Optional module -> the files that may import it at module level: only pytest loads its plugin.
EAGER_OK = {"pytest": {"testing/pytest_plugin.py"}}

# Declared distribution -> why nothing in the kernel imports it.
NOT_IMPORTED = {
    "httptools": "uvicorn's C HTTP parser: uvicorn loads it itself when it is installed",
}


def declared_requirements() -> list[Requirement]:
    """The kernel's requirements: its pyproject.toml in a source checkout, else the installed metadata.

    An editable install's metadata is as old as its last `pip install -e`, so
    in a checkout the pyproject (what a build would declare) is the truth.
    """
    if PYPROJECT.is_file() and sys.version_info >= (3, 11):
        import tomllib

        project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
        lines = list(project["dependencies"])
        for extra, extra_lines in project.get("optional-dependencies", {}).items():
            lines += [f"{line}; extra == '{extra}'" for line in extra_lines]
    else:
        lines = importlib.metadata.requires("astuner") or []
    return [Requirement(line) for line in lines]


def kernel_imports() -> dict[str, dict[str, bool]]:
    """Top-level module -> {file: imported at module level (not inside a function)}."""
    found: dict[str, dict[str, bool]] = defaultdict(dict)

    def visit(node: ast.AST, where: str, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for orelse in child.orelse:
                    visit(orelse, where, in_function)
                continue
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                names = [child.module]
            for name in names:
                top = name.split(".")[0]
                found[top][where] = found[top].get(where, False) or not in_function
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(child, where, inner)

    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] in NOT_KERNEL_CODE:
            continue
        visit(ast.parse(path.read_text(encoding="utf-8")), str(relative), False)
    return found


def third_party(imports: dict[str, dict[str, bool]]) -> dict[str, dict[str, bool]]:
    return {
        module: files
        for module, files in imports.items()
        if module not in sys.stdlib_module_names and module != "astuner"
    }


@pytest.fixture(scope="module")
def scan() -> tuple[dict[str, dict[str, bool]], list[Requirement], dict[str, list[str]]]:
    return third_party(kernel_imports()), declared_requirements(), importlib.metadata.packages_distributions()


def test_every_third_party_import_is_declared(scan) -> None:
    imports, requirements, distributions = scan
    base = {canonicalize_name(r.name) for r in requirements if r.marker is None}
    undeclared = {}
    for module, files in sorted(imports.items()):
        if module in OPTIONAL:
            continue
        dists = {canonicalize_name(d) for d in distributions.get(module, [])}
        if not dists & base:
            undeclared[module] = (sorted(dists) or ["not installed"], sorted(files))
    assert undeclared == {}, (
        "kernel/src/astuner imports these without declaring them in kernel/pyproject.toml's "
        f"dependencies (module: (distribution, files)): {undeclared}"
    )


def test_optional_imports_are_lazy(scan) -> None:
    imports, requirements, _ = scan
    eager = {
        module: sorted(
            file
            for file, top_level in imports.get(module, {}).items()
            if top_level and file not in EAGER_OK.get(module, ())
        )
        for module in OPTIONAL
    }
    assert {module: files for module, files in eager.items() if files} == {}, (
        "optional modules must be imported inside the function that needs them"
    )
    extras = {canonicalize_name(r.name) for r in requirements if r.marker is not None}
    assert {"agentscope", "openai"} <= extras  # the two that are pip extras really are


def test_every_declared_dependency_is_imported(scan) -> None:
    imports, requirements, distributions = scan
    imported = {canonicalize_name(dist) for module in imports for dist in distributions.get(module, [])}
    unused = sorted(
        r.name
        for r in requirements
        if r.marker is None
        and canonicalize_name(r.name) not in imported
        and canonicalize_name(r.name) not in NOT_IMPORTED
    )
    assert unused == [], f"kernel/pyproject.toml declares {unused}, which nothing in the kernel imports"


def test_gguf_is_declared_with_the_dev_floor(scan) -> None:
    _, requirements, _ = scan
    [gguf] = [r for r in requirements if canonicalize_name(r.name) == "gguf"]
    assert gguf.marker is None and str(gguf.specifier) == ">=0.10"


@pytest.mark.skipif(sys.version_info < (3, 11) or not PLUGINS.is_dir(), reason="needs tomllib and a checkout")
def test_no_plugin_declares_accelerate_without_importing_it() -> None:
    import tomllib

    offenders = []
    for pyproject in sorted(PLUGINS.glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        declared = {canonicalize_name(Requirement(line).name) for line in project.get("dependencies", [])}
        if "accelerate" not in declared:
            continue
        sources = (pyproject.parent / "src").rglob("*.py")
        if not any("accelerate" in _imports_of(path) for path in sources):
            offenders.append(pyproject.parent.name)
    assert offenders == []


def _imports_of(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.split(".")[0])
    return modules
