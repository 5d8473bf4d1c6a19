"""What docs/coming-from-the-tutorials.md quotes astuner saying is what it says."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from astuner.cli import make_app
from astuner.plugins import Plugins

REPO = Path(__file__).resolve().parents[2]
MIGRATION = REPO / "docs" / "coming-from-the-tutorials.md"


def test_the_quoted_kill_refusal_is_the_cli_s() -> None:
    (row,) = [line for line in MIGRATION.read_text().splitlines() if line.startswith("| `--kill")]
    quoted = re.search(r"not offered \(`([^`]+)`\)", row)
    assert quoted is not None, row
    conf = REPO / "examples" / "tool_agent" / "tool_agent.yaml"
    result = CliRunner().invoke(make_app(Plugins()), ["run", "--conf", str(conf), "--kill", "python"])
    assert result.exit_code != 0
    assert quoted.group(1) in result.output
