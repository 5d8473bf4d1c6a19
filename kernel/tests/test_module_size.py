"""Every module of the kernel and of the plugins stays readable in one sitting: at most 400 lines."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIMIT = 400


def test_no_source_module_is_over_400_lines() -> None:
    sources = [*(REPO / "kernel" / "src").rglob("*.py"), *REPO.glob("plugins/*/src/**/*.py")]
    assert len(sources) > 100
    too_long = {
        str(path.relative_to(REPO)): n
        for path in sources
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > LIMIT
    }
    assert too_long == {}, f"split these modules (lines): {too_long}"
