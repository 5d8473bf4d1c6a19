"""Decide whether two answer strings mean the same value.

First both are normalised (spacing, `$`, thousands commas, `\\text{}`
units, `x = ` prefixes, a final period). Numbers then compare numerically
with a tolerance: `1,234` = `1234.0`, `3/4` = `\\frac{3}{4}` = `0.75`, and a
percentage matches either its number or its fraction (`50%` = `50` =
`0.5`). Anything else (expressions, intervals, roots) goes to `math-verify`
for a symbolic check, on inputs of bounded length, in a child process
that is killed when the check runs past its time limit (`bounded.py`).
"""

from __future__ import annotations

import math
import re

from astuner_judge_math import bounded

_TEXT_COMMANDS = re.compile(r"\\(?:text|textbf|mathrm|mbox|textnormal)\s*\{([^{}]*)\}")
_DROPPED = (
    "\\$",
    "$",
    "\\!",
    "\\,",
    "\\;",
    "\\:",
    "\\left",
    "\\right",
    "^\\circ",
    "^{\\circ}",
    "°",
)
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_ASSIGNMENT = re.compile(r"^[a-zA-Z]\w*\s*=\s*(.+)$")
_PLAIN = r"-?(?:\d+(?:\.\d*)?|\.\d+)"
_NUMBER_WITH_UNIT = re.compile(rf"({_PLAIN}(?:\s*/\s*\d+)?\s*%?)\s*(?:[a-zA-Z][a-zA-Z .]*)?")
_FRACTION = re.compile(rf"({_PLAIN})\s*/\s*({_PLAIN})")
_LATEX_FRACTION = re.compile(r"(-?)\\[dt]?frac\s*\{\s*(-?[\d.]+)\s*\}\s*\{\s*(-?[\d.]+)\s*\}")
_MAX_SYMBOLIC_CHARS = 300
_LATEX_COMMAND = re.compile(r"\\[a-zA-Z]+")
_WORD = re.compile(r"[a-zA-Z]{2,}")


def normalise(text: str) -> str:
    """The answer with what does not change its value removed."""
    t = str(text).strip()
    t = _TEXT_COMMANDS.sub(r"\1", t)
    for token in _DROPPED:
        t = t.replace(token, "")
    t = t.replace("\\%", "%").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    t = _THOUSANDS.sub("", t)
    t = re.sub(r"\s+", " ", t).strip().rstrip(".").strip()
    assigned = _ASSIGNMENT.match(t)
    if assigned:
        t = assigned.group(1).strip()
    return t


def numbers(text: str) -> set[float]:
    """The values a normalised answer can mean; empty when it is not a number.

    `50%` can mean 50 or 0.5; a number followed by a unit word (`72 clips`)
    is that number.
    """
    match = _NUMBER_WITH_UNIT.fullmatch(text)
    core = match.group(1).strip() if match else text
    percent = core.endswith("%")
    core = core.rstrip("%").strip()
    value = _number(core)
    if value is None or not math.isfinite(value):
        return set()
    return {value, value / 100} if percent else {value}


def _number(core: str) -> float | None:
    if re.fullmatch(_PLAIN, core):
        return float(core)
    fraction = _FRACTION.fullmatch(core)
    latex = _LATEX_FRACTION.fullmatch(core)
    if fraction:
        top, bottom = float(fraction.group(1)), float(fraction.group(2))
    elif latex:
        top, bottom = float(latex.group(1) + latex.group(2)), float(latex.group(3))
    else:
        return None
    return top / bottom if bottom else None


def looks_like_answer(text: str) -> bool:
    """True when the whole text is one short answer (`72 clips`, `(1,2)`, `\\frac{3}{4}`), not prose."""
    t = normalise(text)
    if not t or len(t) > 40 or "\n" in t:
        return False
    return bool(numbers(t)) or not _WORD.search(_LATEX_COMMAND.sub("", t))


def equivalent(
    prediction: str,
    reference: str,
    *,
    rel_tol: float = 1e-9,
    abs_tol: float = 1e-6,
    symbolic: bool = True,
    timeout_s: float = 2,
) -> bool:
    """Whether `prediction` states the same answer as `reference`.

    A symbolic check that takes longer than `timeout_s` seconds is stopped
    and counts as not equal, on whichever thread this runs (see `bounded`).
    """
    a, b = normalise(prediction), normalise(reference)
    if not a or not b:
        return False
    if a == b:
        return True
    # Numbers by hand before math-verify: about 8 us a pair here against 1.8 ms for its sympy parse,
    # and most answers are numbers.
    xs, ys = numbers(a), numbers(b)
    if xs and ys:
        return any(math.isclose(x, y, rel_tol=rel_tol, abs_tol=abs_tol) for x in xs for y in ys)
    if not symbolic or max(len(a), len(b)) > _MAX_SYMBOLIC_CHARS:
        return False
    return _symbolic_equal(a, b, timeout_s)


def _symbolic_equal(prediction: str, reference: str, timeout_s: float) -> bool:
    answered, equal = bounded.ask("equal", prediction, reference, limit_s=timeout_s)
    return answered and bool(equal)
