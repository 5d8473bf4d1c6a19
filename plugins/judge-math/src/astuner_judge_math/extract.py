"""Pull the final answer out of a model's text and the reference out of a task.

A prediction is, in order: the last `\\boxed{...}` (nested braces kept
whole), the text after a GSM8K-style `####`, the whole text when it is
itself an answer (`72`, `$5.00`, `\\frac{3}{4}`), the answer `math-verify`
extracts from prose (LaTeX such as `Thus x = \\frac{3}{4}` or `$\\sqrt{2}$`,
an anchored `the answer is 7`, else its last expression), else the last
number in the text. A reference is the text after `####`, else its last
`\\boxed{}`, else the whole value.
"""

from __future__ import annotations

import math
import re
import threading
from typing import Any

from astuner_judge_math.compare import looks_like_answer

_BOX_COMMANDS = ("\\boxed", "\\fbox")
# -1,234.5 / 3/4 / 50% / .5 ; a leading sign only when not glued to a word ("x-3" is not "-3").
_NUMBER = re.compile(r"(?<![\w.])-?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:\s*/\s*\d+)?%?")


def boxed_answers(text: str) -> list[str]:
    """The contents of every `\\boxed{...}` / `\\fbox{...}`, nested braces included, in order."""
    found: list[str] = []
    start = 0
    while True:
        hits = [(text.find(cmd, start), cmd) for cmd in _BOX_COMMANDS]
        hits = [(i, cmd) for i, cmd in hits if i >= 0]
        if not hits:
            return found
        index, cmd = min(hits)
        cursor = index + len(cmd)
        while cursor < len(text) and text[cursor] == " ":
            cursor += 1
        if cursor >= len(text) or text[cursor] != "{":
            start = cursor
            continue
        depth, end = 0, None
        for pos in range(cursor, len(text)):
            if text[pos] == "{":
                depth += 1
            elif text[pos] == "}":
                depth -= 1
                if depth == 0:
                    end = pos
                    break
        if end is None:  # unbalanced: the model stopped mid-answer
            return found
        found.append(text[cursor + 1 : end].strip())
        start = end + 1


def last_number(text: str) -> str | None:
    numbers = [m.group(0) for m in _NUMBER.finditer(text) if m.group(0)]
    return numbers[-1].strip() if numbers else None


def math_verify_answer(text: str, timeout_s: int = 2) -> str | None:
    """The answer `math_verify.parse` finds in prose (LaTeX first, then expressions), as text.

    The text is math-verify's own match (`\\frac{3}{4}`, `x = \\frac{1}{2}`,
    `1200.50`), so `compare.equivalent` reads it like any other answer; a
    percentage math-verify recognised (its value is the number / 100) keeps
    its `%`. None when it finds nothing it could turn into a value.
    """
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    # math-verify's time limit uses SIGALRM, which only the main thread can set.
    limit = timeout_s if threading.current_thread() is threading.main_thread() else None
    configs = [LatexExtractionConfig(), ExprExtractionConfig()]
    try:
        found = parse(text, extraction_config=configs, parsing_timeout=limit)
    except Exception:  # a parse failure or a timeout in sympy: no answer found this way
        return None
    if len(found) < 2:  # only a string: math-verify matched something it could not evaluate
        return None
    value, answer = found[0], str(found[1]).strip()
    if not answer:
        return None
    return f"{answer}%" if _is_percentage(value, answer) else answer


def _is_percentage(value: Any, answer: str) -> bool:
    try:
        shown = float(answer)  # only a plain number can be a percentage here
        # math-verify keeps `25%` as the unevaluated 25·(1/100); `doit()` evaluates it
        meant = float(value.doit() if hasattr(value, "doit") else value)
    except (TypeError, ValueError):
        return False
    return shown != 0 and math.isclose(meant, shown / 100) and not math.isclose(meant, shown)


def extract_prediction(text: str | None, *, timeout_s: int = 2) -> str | None:
    """The model's final answer in `text`, or None when it gave none.

    `timeout_s` limits math-verify's extraction from prose (on the main thread).
    """
    if text is None:
        return None
    text = str(text).strip()
    if not text:
        return None
    boxed = boxed_answers(text)
    if boxed:
        return boxed[-1]
    if "####" in text:
        tail = text.rsplit("####", 1)[1].strip()
        return tail.splitlines()[0].strip() if tail else None
    if looks_like_answer(text):
        return text
    return math_verify_answer(text, timeout_s) or last_number(text)


def extract_reference(value: Any) -> str | None:
    """The reference answer from a task's answer field (GSM8K solution, plain value, LaTeX)."""
    if value is None:
        return None
    text = str(value).strip()
    if "####" in text:
        text = text.rsplit("####", 1)[1].strip()
    else:
        boxed = boxed_answers(text)
        if boxed:
            text = boxed[-1]
    return text or None
