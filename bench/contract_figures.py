"""The figures of issue 32 ("A contract others can build on"), for one source tree.

Run it on two trees (before and after a change) and compare:

    .venv/bin/python bench/contract_figures.py --root /work/orig
    .venv/bin/python bench/contract_figures.py            # the tree this script lives in
    .venv/bin/python bench/contract_figures.py --json     # the same figures, machine-readable

Every figure but the AST walk is taken in fresh subprocesses whose PYTHONPATH puts the measured
tree's `kernel/src` and `plugins/*/src` first: the venv's editable installs would otherwise import
the tree the venv was built from. Plugin discovery still reads the installed entry points, which
name modules (`astuner_backbone_torch.plugin`) that then import from PYTHONPATH. `astuner.__file__`
is printed to show which tree was measured.

Figures:

1. Public modules: `len(__all__)` and the names of `astuner.api`, and of `astuner.training` where it
   exists.
2. Whole-config parameters: function parameters (kernel and plugin sources, not tests nor
   `templates/`) whose annotation mentions `AstunerConfig`, or named `config` and annotated `Any` or
   `AstunerConfig | Any`. Counted in total, outside the exempt files (`EXEMPT_KERNEL`,
   `EXEMPT_BACKBONE_MODULES`), and per file.
3. Import cost: `import astuner.hookspecs` and `import astuner.api` each in a fresh interpreter: the
   `astuner*` modules then loaded, which heavy libraries (`HEAVY`) came along, and the import's wall
   time (median of `--repeat` processes).
4. CLI start: wall time of `python -m astuner --version` and `--help` (median of `--repeat` processes).
5. Config walk: a one-step GRPO run of the torch backbone on a tiny random-weight model, profiled
   (`sys.setprofile`, and `threading.setprofile` for threads it starts) from the entry into
   `TorchBackbone.run` to its return. A *stop* is a distinct function of astuner code (a module under
   the tree's `kernel/src/astuner` or `plugins/*/src`) that was called with the whole `AstunerConfig`
   as one of its arguments (the object itself, not a section of it; `*args` and `**kwargs` members
   count; the config's own methods are not stops for their `self`). A resumed coroutine or generator
   is not called again. *Places* are the distinct modules of the stops; *packages* their distinct
   kernel subpackages (`astuner.core`, ...; a top-level kernel module counts as `astuner`) or plugin
   packages. *Returns*: the modules of those calls in call order, consecutive calls in one module
   collapsed into one visit; each visit to a module already visited before (and left since) is one
   return.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

# The only places allowed to see the whole config (issue 32): the config's own modules, the
# compatibility shims that read old keys, and the launch path that turns a config into a run: the CLI,
# tune(), the run lifecycle, components.py (where each plugin's block is picked out of the config and
# its part built) and rollout/stack.py (where a backbone's config becomes the rollout stack). The
# episode source is where the verl and Trinity backbones' worker processes start, from the config
# they were handed. Paths relative to kernel/src/astuner.
EXEMPT_KERNEL = (
    "config.py",
    "config_*.py",
    "compat.py",
    "launch.py",
    "cli.py",
    "lifecycle.py",
    "tuner/tune.py",
    "components.py",
    "rollout/stack.py",
    "rollout/episode.py",
)
# A backbone's entry is where the whole config is translated into the backbone's own settings: these
# modules of `backbone-*` plugins may see it.
EXEMPT_BACKBONE_MODULES = ("backbone.py", "translate.py", "settings.py")

HEAVY = ("typer", "torch", "transformers", "fastapi", "uvicorn", "agentscope", "numpy", "pydantic")
PUBLIC_MODULES = ("astuner.api", "astuner.training")
CONFIG_ANY = {"Any", "AstunerConfig | Any", "Any | AstunerConfig"}
WALK_TIMEOUT_S = 300


def source_dirs(root: Path) -> list[Path]:
    """The tree's import roots: the kernel's `src` and each plugin's `src`."""
    return [root / "kernel" / "src", *sorted(root.glob("plugins/*/src"))]


def tree_env(root: Path) -> dict[str, str]:
    """An environment whose imports resolve to `root`'s sources, ahead of the venv's editable installs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASTUNER_")}
    paths = [str(p) for p in source_dirs(root)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run_python(root: Path, code: str, *args: str, timeout: float = 120) -> str:
    """Run `code` in a fresh interpreter on `root`'s sources; its stdout (fails loudly on error)."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=tree_env(root),
        cwd=root,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"subprocess failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


PUBLIC_CODE = """
import importlib, json, sys
import astuner
out = {"astuner_file": astuner.__file__, "modules": {}}
for name in sys.argv[1:]:
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        out["modules"][name] = None
        continue
    out["modules"][name] = sorted(getattr(module, "__all__", []))
print(json.dumps(out))
"""


def public_names(root: Path) -> dict[str, Any]:
    """`__all__` of each public module; None for a module the tree does not have."""
    return json.loads(run_python(root, PUBLIC_CODE, *PUBLIC_MODULES))


def annotation_text(node: ast.expr | None) -> str:
    """The annotation as written, a string annotation unquoted."""
    if node is None:
        return ""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.strip()
    return ast.unparse(node)


def is_whole_config(arg: ast.arg) -> bool:
    """Whether a parameter takes the whole config: typed with it, or an untyped-in-effect `config`."""
    text = annotation_text(arg.annotation)
    return "AstunerConfig" in text or (arg.arg == "config" and text in CONFIG_ANY)


def exempt(root: Path, path: Path) -> bool:
    """Whether `path` is one of the places allowed to see the whole config."""
    kernel = root / "kernel" / "src" / "astuner"
    if path.is_relative_to(kernel):
        relative = path.relative_to(kernel).as_posix()
        # `*` of fnmatch also matches `/`: a pattern only matches a path as deep as itself.
        return any(
            fnmatch(relative, pattern) and pattern.count("/") == relative.count("/")
            for pattern in EXEMPT_KERNEL
        )
    plugin = path.relative_to(root / "plugins").parts
    # plugins/<plugin>/src/<package>/<module>.py
    return plugin[0].startswith("backbone-") and len(plugin) == 4 and plugin[3] in EXEMPT_BACKBONE_MODULES


def source_files(root: Path) -> list[Path]:
    """Kernel and plugin sources, without tests and scaffolding templates."""
    files = list((root / "kernel" / "src" / "astuner").rglob("*.py"))
    for src in sorted(root.glob("plugins/*/src")):
        files.extend(src.rglob("*.py"))
    return sorted(p for p in files if not {"templates", "tests"} & set(p.parts))


def config_parameters(root: Path) -> dict[str, Any]:
    """Whole-config parameters per file, and totals with and without the exempt files."""
    per_file: dict[str, int] = {}
    exempt_files: list[str] = []
    for path in source_files(root):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        count = 0
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                a = node.args
                params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
                count += sum(is_whole_config(p) for p in params)
        if count:
            name = path.relative_to(root).as_posix()
            per_file[name] = count
            if exempt(root, path):
                exempt_files.append(name)
    total = sum(per_file.values())
    outside = total - sum(per_file[f] for f in exempt_files)
    return {"total": total, "outside_exempt": outside, "per_file": per_file, "exempt_files": exempt_files}


IMPORT_CODE = """
import json, sys, time
start = time.perf_counter()
import {module}
seconds = time.perf_counter() - start
heavy = [n for n in sys.argv[1:] if n in sys.modules]
own = sorted(n for n in sys.modules if n == "astuner" or n.startswith("astuner"))
print(json.dumps({{"seconds": seconds, "heavy": heavy, "astuner_modules": own}}))
"""


def import_cost(root: Path, module: str, repeat: int) -> dict[str, Any]:
    """Modules loaded and median wall time of `import module` in fresh interpreters."""
    runs = [json.loads(run_python(root, IMPORT_CODE.format(module=module), *HEAVY)) for _ in range(repeat)]
    last = runs[-1]
    return {
        "median_s": statistics.median(r["seconds"] for r in runs),
        "astuner_modules": len(last["astuner_modules"]),
        "heavy": last["heavy"],
    }


def cli_time(root: Path, flag: str, repeat: int) -> float:
    """Median wall time of `python -m astuner <flag>` in fresh processes, on `root`'s code."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run = subprocess.run(
            [sys.executable, "-m", "astuner", flag],
            env=tree_env(root),
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        times.append(time.perf_counter() - start)
        if run.returncode != 0:
            raise RuntimeError(f"astuner {flag} failed:\n{run.stdout}\n{run.stderr}")
    return statistics.median(times)


# Runs in the measured tree's interpreter: argv = out.json, workdir, workflows folder, source dirs...
WALK_CODE = r"""
import functools, json, sys, threading
from pathlib import Path

import yaml

out, workdir, workflows, *roots = sys.argv[1:]
sys.path.insert(0, workflows)
from astuner.testing.models import save_tiny_qwen2
from astuner.config import AstunerConfig
import astuner_backbone_torch.backbone as torch_backbone

model = save_tiny_qwen2(Path(workdir) / "model")
block = {
    "experiment_name": "walk",
    "model": {"path": str(model)},
    "task_reader": {"type": "arith", "arith": {"train_size": 4, "validation_size": 2}},
    "data": {"train_batch_size": 2},
    "rollout": {
        "agentscope_workflow": "tiny_workflows->TwoTurn",
        "num_repeat": 2,
        "max_response_length_in_one_turn": 4,
        "engines": {"transformers": {"continuous_batching": False, "num_threads": 1}},
    },
    "trainer_common": {"total_training_steps": 1, "save_freq": 1, "test_freq": 100, "seed": 7},
    "torch": {"train_dtype": "float32", "gen_dtype": "float32", "num_threads": 1},
}
conf = Path(workdir) / "walk.yaml"
conf.write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")

prefixes = tuple(str(Path(r).resolve()) + "/" for r in roots)
SUSPENDABLE = 0x20 | 0x80 | 0x100 | 0x200  # generator, coroutine, iterable coroutine, async generator
own_methods = tuple(c.__qualname__ + "." for c in AstunerConfig.__mro__)
calls = []
entered = {}


def holds_config(value):
    if isinstance(value, AstunerConfig):
        return True
    if isinstance(value, tuple):
        return any(isinstance(v, AstunerConfig) for v in value)
    if isinstance(value, dict):
        return any(isinstance(v, AstunerConfig) for v in value.values())
    return False


def profile(frame, event, arg):
    if event != "call":
        return
    code = frame.f_code
    if not code.co_filename.startswith(prefixes):
        return
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # *args, **kwargs
    if not count:
        return
    if code.co_flags & SUSPENDABLE:
        if id(frame) in entered:
            return
        entered[id(frame)] = frame
    names = code.co_varnames[:count]
    if code.co_qualname.startswith(own_methods):  # the config's own methods: their `self` does not count
        names = names[1:]
    values = frame.f_locals
    if any(holds_config(values.get(name)) for name in names):
        calls.append((frame.f_globals.get("__name__", "?"), code.co_qualname))


entry_name = "run" if hasattr(torch_backbone.TorchBackbone, "run") else "train"
original = getattr(torch_backbone.TorchBackbone, entry_name)


@functools.wraps(original)
def traced(self, *args, **kwargs):
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        return original(self, *args, **kwargs)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        traced.calls = list(calls)


setattr(torch_backbone.TorchBackbone, entry_name, traced)
from astuner.cli import main

sys.argv = ["astuner", "run", "--conf", str(conf), "--backbone", "torch"]
try:
    main()
except SystemExit as exc:
    if exc.code not in (0, None):
        raise
Path(out).write_text(json.dumps({"entry": "TorchBackbone." + entry_name, "calls": traced.calls}))
"""


def package_of(module: str) -> str:
    """`astuner.core.x` -> `astuner.core`, `astuner.launch` -> `astuner`, a plugin module -> its package."""
    parts = module.split(".")
    if parts[0] == "astuner" and len(parts) > 2:
        return ".".join(parts[:2])
    return parts[0]


def config_walk(root: Path) -> dict[str, Any]:
    """Profile one tiny torch training step; stops, places, packages and returns (see the docstring)."""
    workflows = root / "plugins" / "backbone-torch" / "tests"
    with tempfile.TemporaryDirectory(prefix="contract-walk-") as workdir:
        out = Path(workdir) / "walk.json"
        roots = [str(p) for p in source_dirs(root)]
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", WALK_CODE, str(out), workdir, str(workflows), *roots],
            env=tree_env(root),
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=WALK_TIMEOUT_S,
            check=False,
        )
        seconds = time.perf_counter() - start
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(
                f"walk run failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
            )
        walk = json.loads(out.read_text(encoding="utf-8"))
    calls = [tuple(c) for c in walk["calls"]]
    stops = sorted({f"{module}.{name}" for module, name in calls})
    modules = [module for module, _ in calls]
    visits = [m for i, m in enumerate(modules) if i == 0 or modules[i - 1] != m]
    returns = sum(1 for i, m in enumerate(visits) if m in visits[:i])
    places = Counter(modules)
    return {
        "entry": walk["entry"],
        "run_s": seconds,
        "calls": len(calls),
        "stops": stops,
        "places": dict(sorted(places.items())),
        "packages": sorted({package_of(m) for m in places}),
        "returns": returns,
        "visits": visits,
    }


def measure(root: Path, repeat: int, walk: bool) -> dict[str, Any]:
    """Every figure for `root`."""
    public = public_names(root)
    figures: dict[str, Any] = {
        "root": str(root),
        "astuner_file": public["astuner_file"],
        "public": public["modules"],
        "config_parameters": config_parameters(root),
        "imports": {m: import_cost(root, m, repeat) for m in ("astuner.hookspecs", "astuner.api")},
        "cli_s": {flag: cli_time(root, flag, repeat) for flag in ("--version", "--help")},
    }
    if walk:
        figures["walk"] = config_walk(root)
    return figures


def report(f: dict[str, Any]) -> str:
    """The figures as a plain table."""
    lines = [f"tree: {f['root']}", f"astuner.__file__: {f['astuner_file']}", "", "1. public modules"]
    for module, names in f["public"].items():
        if names is None:
            lines.append(f"  {module:<22} (absent)")
        else:
            lines.append(f"  {module:<22} __all__: {len(names)}")
            lines.append("    " + ", ".join(names))
    cp = f["config_parameters"]
    lines += [
        "",
        "2. whole-config parameters (* = exempt: backbone entries and the launch path)",
        f"  total {cp['total']}, outside exempt {cp['outside_exempt']}",
    ]
    for name, count in sorted(cp["per_file"].items(), key=lambda kv: (-kv[1], kv[0])):
        mark = "*" if name in cp["exempt_files"] else " "
        lines.append(f"  {count:>4} {mark} {name}")
    lines += ["", "3. import cost (fresh interpreter, median wall time)"]
    for module, cost in f["imports"].items():
        heavy = ", ".join(cost["heavy"]) or "-"
        lines.append(
            f"  import {module:<18} {cost['median_s'] * 1000:7.0f} ms  "
            f"astuner modules {cost['astuner_modules']:>3}  heavy: {heavy}"
        )
    lines += ["", "4. CLI start (python -m astuner, median wall time)"]
    lines += [f"  astuner {flag:<10} {s * 1000:7.0f} ms" for flag, s in f["cli_s"].items()]
    if "walk" in f:
        w = f["walk"]
        lines += [
            "",
            f"5. config walk from {w['entry']} (one tiny GRPO step, {w['run_s']:.0f} s)",
            f"  stops {len(w['stops'])}, places {len(w['places'])}, packages {len(w['packages'])}, "
            f"returns {w['returns']}, calls {w['calls']}",
            "  packages: " + ", ".join(w["packages"]),
            "  places (calls): " + ", ".join(f"{m} ({n})" for m, n in w["places"].items()),
            "  stops:",
            *(f"    {s}" for s in w["stops"]),
            "  visits in order: " + " > ".join(w["visits"]),
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--repeat", type=int, default=5, help="fresh processes per timing (median)")
    parser.add_argument("--no-walk", action="store_true", help="skip the profiled training step")
    args = parser.parse_args()
    figures = measure(args.root.resolve(), args.repeat, walk=not args.no_walk)
    print(json.dumps(figures, indent=2) if args.json else report(figures))


if __name__ == "__main__":
    main()
