"""A companion `stopwatch`: `astuner run --with-stopwatch [LABEL]` writes how long the run took.

Besides the flag's value it names the one service it needs, `run_folder`.
"""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from astuner.api import Register, hookimpl


@contextmanager
def stopwatch(label: str | None, run_folder: Path) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield  # the run happens here
    finally:
        seconds = time.monotonic() - started
        (run_folder / "stopwatch.txt").write_text(f"{label or 'run'}: {seconds:.1f} s\n")


@hookimpl
def register_companions(register: Register) -> None:
    register("stopwatch", stopwatch, summary="Writes how long the run took into its folder.")
