"""The default madness checks: `nonsense`, `wrong_toolcall` and `non_ascii`.

The checks themselves live in `astuner.core.madness`; this plugin only
names them. `nonsense` is on by default (`rollout.compute_madness_checklist`),
`non_ascii` is opt-in.
"""

from __future__ import annotations

from astuner.core.madness import (
    NonAsciiCheck,
    NonAsciiSettings,
    NonsenseCheck,
    NonsenseSettings,
    WrongToolCallCheck,
)
from astuner.hookspecs import Register, hookimpl


@hookimpl
def register_madness_checks(register: Register) -> None:
    register(
        "nonsense",
        NonsenseCheck,
        settings=NonsenseSettings,
        summary="stray special tokens and n-gram repetition loops in a reply",
    )
    register(
        "wrong_toolcall",
        WrongToolCallCheck,
        summary="a reply with a malformed tool call",
    )
    register(
        "non_ascii",
        NonAsciiCheck,
        settings=NonAsciiSettings,
        summary="non-ASCII characters in a reply (opt-in)",
    )
