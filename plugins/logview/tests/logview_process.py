"""Reading a viewer's address off the output of the process that serves it."""

from __future__ import annotations

import subprocess


def printed_url(proc: subprocess.Popen[str], before: str) -> tuple[list[str], str]:
    """The lines `proc` printed up to the first with `{before} http://...`, and that address.

    Fails with everything printed if the process ends first, so a server that
    never came up shows why.
    """
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line)
        if f"{before} http://" in line:
            return lines, line.split(f"{before} ", 1)[1].split()[0]
    raise AssertionError(f"the process ended without printing '{before} http://...':\n{''.join(lines)}")
