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

import re
from typing import Any

from astuner_judge_math import bounded
from astuner_judge_math.compare import looks_like_answer

_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox) *")
# -1,234.5 / 3/4 / 50% / .5 ; a leading sign only when not glued to a word ("x-3" is not "-3").
_NUMBER = re.compile(r"(?<![\w.])-?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:\s*/\s*\d+)?%?")


def boxed_answers(text: str) -> list[str]:
    """The contents of every `\\boxed{...}` / `\\fbox{...}`, nested braces included, in order."""
    found: list[str] = []
    start = 0
    # One regex search a box keeps this linear: a `find` per command rescanned the rest of the text
    # for the command that was absent, a minute for 100,000 `\boxed{1}`.
    while command := _BOX_COMMAND.search(text, start):
        cursor = command.end()
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
    return found


def last_number(text: str) -> str | None:
    numbers = [m.group(0) for m in _NUMBER.finditer(text) if m.group(0)]
    return numbers[-1].strip() if numbers else None


def extract_prediction(text: str | None, *, timeout_s: float = 2) -> str | None:
    """The model's final answer in `text`, or None when it gave none.

    From prose, the answer is math-verify's own match (`\\frac{3}{4}`,
    `x = \\frac{1}{2}`, `1200.50`; a percentage it recognised keeps its `%`),
    else the last number. math-verify gets `timeout_s` seconds, on whichever
    thread this runs; text it cannot read in time has no answer, rather than
    whatever number it happens to end with.
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
    answered, found = bounded.ask("prose_answer", text, limit_s=timeout_s)
    if not answered:
        return None
    return found or last_number(text)


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
