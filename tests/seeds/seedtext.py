"""The tutorials in ../shared/seeds/, read at test time: their code blocks are the tests' input.

A seed test assembles a tutorial's fragments into files laid out as the
tutorial lays them out, changing only what the tutorial leaves to the
reader (model path, data folder) and the typos listed in `SEED_TYPOS`,
each checked to still be in the text, so a corrected tutorial shows up here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from astuner.config import deep_merge
from astuner.testing.cli import run_astuner

SEEDS = Path(__file__).resolve().parents[2] / ".." / "shared" / "seeds"
GSM8K = SEEDS.parent / "data" / "gsm8k"

needs_seeds = pytest.mark.skipif(
    not SEEDS.is_dir() or not (GSM8K / "test.jsonl").is_file(),
    reason=f"the tutorials and GSM8K are not at {SEEDS.parent} (../shared beside the repository)",
)

_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)

# Mistakes in the tutorials' text that no framework could run: (seed, language, wrong, right).
SEED_TYPOS = [
    # the comma sits inside the comment: a SyntaxError as printed
    (
        2,
        "python",
        "model=model_tuner # use model_tuner as model,",
        "model=model_tuner,  # use model_tuner as model",
    ),
]


def seed_text(number: int) -> str:
    (path,) = SEEDS.glob(f"{number:03d}_*.txt")
    return path.read_text(encoding="utf-8")


def code_blocks(number: int, language: str) -> list[str]:
    """Every fenced block of `language` in seed `number`, in order, with the known typos fixed."""
    blocks = [body for lang, body in _FENCE.findall(seed_text(number)) if lang == language]
    for seed, lang, wrong, right in SEED_TYPOS:
        if (seed, lang) == (number, language):
            assert any(wrong in block for block in blocks), f"seed {seed} no longer has {wrong!r}"
            blocks = [block.replace(wrong, right) for block in blocks]
    return blocks


def merged_yaml(blocks: list[str]) -> dict[str, Any]:
    """The tutorial's YAML fragments, each added to the same file as it says."""
    merged: dict[str, Any] = {}
    for block in blocks:
        merged = deep_merge(merged, yaml.safe_load(block) or {})
    return merged


def indent(code: str, spaces: int) -> str:
    """A fragment placed inside a function body."""
    return "".join(" " * spaces + line if line.strip() else line for line in code.splitlines(True))


def sources(shown: str) -> dict[str, str]:
    """`astuner config show` output as dotted key -> its source comment."""
    out, stack = {}, []
    for line in shown.splitlines():
        body, _, comment = line.partition("  # ")
        depth = (len(body) - len(body.lstrip())) // 2
        key = body.strip().split(":", 1)[0]
        stack[depth:] = [key]
        if comment:
            out[".".join(stack[1:] if stack[0] == "astuner" else stack)] = comment
    return out


def leaves(node: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys of every value in a nested mapping."""
    return [
        leaf
        for key, value in node.items()
        for leaf in (leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else [f"{prefix}{key}"])
    ]


def run_seed(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """`astuner ARGS` as the tutorial runs it; must exit 0 without a traceback. Returns stderr."""
    result = run_astuner(*args, cwd=cwd, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    return result.stderr
