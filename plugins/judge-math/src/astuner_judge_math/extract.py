"""Pull the final answer out of a model's text and the reference out of a task.

A prediction is, in order: the last `\\boxed{...}` (nested braces kept
whole), the text after a GSM8K-style `####`, the whole text when it is
itself an answer (`72`, `$5.00`, `\\frac{3}{4}`), else the last number in
the text. A reference is the text after `####`, else its last `\\boxed{}`,
else the whole value.
"""

from __future__ import annotations

import re
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


def extract_prediction(text: str | None) -> str | None:
    """The model's final answer in `text`, or None when it gave none."""
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
    return last_number(text)


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
