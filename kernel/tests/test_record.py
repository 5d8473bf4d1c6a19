"""Records are appended line by line: a write that fails leaves only whole lines and names the file.

And `metrics.jsonl` reads back while a run may still be writing it, and
holds strict JSON: a value that is not finite is written null.
"""

from __future__ import annotations

import errno
import io
import json
import math
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from astuner.errors import AstunerError
from astuner.logs import get_logger
from astuner.record import append_lines, append_rows, read_metrics, strict_json


class FillsUp(io.FileIO):
    """A file on a disk that fills up during the third line: half of it lands, then ENOSPC."""

    lines = 0

    def write(self, data: bytes) -> int:
        FillsUp.lines += 1
        if FillsUp.lines == 3:
            super().write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


def test_a_full_disk_leaves_only_whole_lines_and_names_the_file(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "rollouts" / "step_1.jsonl"
    append_lines(path, [json.dumps({"n": 0})])
    FillsUp.lines = 0
    monkeypatch.setattr(Path, "open", lambda self, mode="r", **kw: io.BufferedWriter(FillsUp(self, "a")))
    expected = rf"Cannot write records to '{path}': No space left on device\. 2 new line"
    with pytest.raises(AstunerError, match=expected):
        append_lines(path, [json.dumps({"n": i, "pad": "x" * 100}) for i in range(1, 5)])
    monkeypatch.undo()
    lines = path.read_text().splitlines()
    assert [json.loads(line)["n"] for line in lines] == [0, 1, 2]  # the half-written third line is gone


def test_metrics_read_back_without_a_half_written_or_foreign_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    assert read_metrics(path) == []  # no file yet: no rows
    append_lines(path, [json.dumps({"step": 1, "reward/mean": 0.5}), "[1, 2]", json.dumps({"step": 2})])
    with path.open("a", encoding="utf-8") as out:
        out.write('{"step": 3, "rew')  # the line a running backbone is writing
    assert read_metrics(path) == [{"step": 1, "reward/mean": 0.5}, {"step": 2}]


def test_values_that_are_not_finite_are_written_null_and_warned_of_once_per_file_and_key(
    tmp_path: Path,
) -> None:
    path = tmp_path / "metrics.jsonl"
    get_logger()  # its first use configures structlog, which would drop the capture's processors
    with capture_logs() as logs:
        for step in (1, 2):
            append_rows(path, [{"step": step, "reward/mean": math.inf, "per_agent": {"a": [1.0, math.nan]}}])
        other = strict_json({"reward/mean": -math.inf}, tmp_path / "eval_summary.json", indent=2)

    def refuse(literal: str) -> None:
        raise AssertionError(f"{literal} is not JSON")

    rows = [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]
    assert rows == [{"step": s, "reward/mean": None, "per_agent": {"a": [1.0, None]}} for s in (1, 2)]
    assert json.loads(other, parse_constant=refuse) == {"reward/mean": None}
    assert [log["event"].split(",")[0] for log in logs] == [
        "'reward/mean' is inf",
        "'per_agent.a' is nan",
        "'reward/mean' is -inf",
    ]
    assert all(log["log_level"] == "warning" for log in logs)
    assert f"{path} keeps null for it" in logs[0]["event"]
