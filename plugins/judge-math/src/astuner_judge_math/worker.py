"""The child process that runs math-verify for the judge: `python -m astuner_judge_math.worker`.

sympy can spend unbounded time inside one C call (`10^{10^{10}}` builds a
ten-billion-digit integer) while holding the GIL, so no thread of the
judge's process, nor math-verify's SIGALRM limit off the main thread, can
stop it. Here the work runs in a process of its own that the judge kills
when a check overruns (`bounded.py`). This module imports nothing from
astuner, so the child starts as fast as math-verify loads.

Protocol, one JSON object a line: the child prints `{"ready": true}` once
math-verify is imported and warm, then answers each request `{"op", "args",
"limit_s"}` with `{"result": ...}`. Before each request it arms a real-time
timer whose default action ends the process, a moment after the parent's
own limit: a child left busy by a parent that died (kill -9) ends too. It
exits when its stdin closes.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import sys
from typing import Any, BinaryIO

# The parent kills an overrunning child at its limit; this backstop is for a parent that cannot.
_GRACE_S = 1.0
# A check that builds huge numbers fails with MemoryError here, fast, instead of swapping.
_HEADROOM = 2 << 30


def symbolic_equal(prediction: str, reference: str) -> bool:
    """Whether math-verify shows the two normalised answers equal."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    configs = [LatexExtractionConfig(), ExprExtractionConfig()]
    try:
        gold = parse(f"${reference}$", extraction_config=configs, parsing_timeout=None)
        pred = parse(f"${prediction}$", extraction_config=configs, parsing_timeout=None)
        return bool(gold and pred and verify(gold, pred, timeout_seconds=None))
    except Exception:  # a parse failure or a MemoryError in sympy means "not shown equal"
        return False


def prose_answer(text: str) -> str | None:
    """The answer math-verify finds in prose (LaTeX first, then expressions), as text.

    The text is math-verify's own match (`\\frac{3}{4}`, `x = \\frac{1}{2}`,
    `1200.50`); a percentage it recognised (its value is the number / 100)
    keeps its `%`. None when it finds nothing it could turn into a value.
    """
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    configs = [LatexExtractionConfig(), ExprExtractionConfig()]
    try:
        found = parse(text, extraction_config=configs, parsing_timeout=None)
        if len(found) < 2:  # only a string: math-verify matched something it could not evaluate
            return None
        value, answer = found[0], str(found[1]).strip()
        if not answer:
            return None
        return f"{answer}%" if _is_percentage(value, answer) else answer
    except Exception:  # a parse failure or a MemoryError in sympy: no answer found this way
        return None


def _is_percentage(value: Any, answer: str) -> bool:
    try:
        shown = float(answer)  # only a plain number can be a percentage here
        # math-verify keeps `25%` as the unevaluated 25·(1/100); `doit()` evaluates it
        meant = float(value.doit() if hasattr(value, "doit") else value)
    except (TypeError, ValueError):
        return False
    return shown != 0 and math.isclose(meant, shown / 100) and not math.isclose(meant, shown)


OPS = {"equal": symbolic_equal, "prose_answer": prose_answer}


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """Say ready, then answer requests until `requests` closes."""

    def reply(message: dict[str, Any]) -> None:
        replies.write(json.dumps(message).encode() + b"\n")
        replies.flush()

    reply({"ready": True})
    for line in requests:
        request = json.loads(line)
        signal.setitimer(signal.ITIMER_REAL, float(request["limit_s"]) + _GRACE_S)
        result = OPS[request["op"]](*request["args"])
        signal.setitimer(signal.ITIMER_REAL, 0)
        reply({"result": result})


def _limit_memory() -> None:
    """Allow _HEADROOM more address space than the warm process has (allocators reserve differently)."""
    try:
        import resource

        with open("/proc/self/statm") as statm:
            soft = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE") + _HEADROOM
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    except (ImportError, OSError, ValueError):  # no /proc or no such limit here: the time limit still holds
        pass


def main() -> None:
    # SIGALRM's default action ends the process even inside a C call that holds the GIL.
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    # Ctrl-C in a terminal reaches the whole process group; the parent decides when this child ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Its one warning says that it sets no time limit of its own: the parent sets it.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    # Warmed before "ready": the first parse builds the LaTeX grammar (0.3 s, more on a busy
    # machine), which would otherwise count against the first check's limit.
    symbolic_equal("\\sqrt{8}", "2\\sqrt{2}")
    prose_answer("so $x = \\frac{1}{2}$")
    _limit_memory()
    # Replies go on a private copy of stdout; a stray print in a library goes to stderr instead.
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr
    serve(sys.stdin.buffer, replies)


if __name__ == "__main__":
    main()
