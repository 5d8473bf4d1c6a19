"""A byte-offset index over one rollout file, with a small summary per trajectory.

Rollout files hold one `Trajectory` JSON object per line and grow to
hundreds of megabytes, almost all of it token ids and log-probs inside
`calls`. The index keeps, per line, its byte range and the few fields the
trajectory list shows and filters on; a page of full trajectories is then
read with one seek per line, so opening a file costs one sequential read
and memory does not grow with the file.

Summaries avoid parsing `calls`: `model_dump_json` writes the fields in
declaration order, so a line is `{"trajectory_id":..,"task_id":..,
"group_id":..,"calls":[...],"reward":..,...}`. The head before `"calls"` and
the tail from the last `],"reward":` are parsed on their own; a quote
inside a JSON string is always escaped, so these markers cannot come from
model text. A line in any other shape is parsed whole.

A line is indexed only if it validates as a `Trajectory`: every field but
`calls` is checked against the model (the whole line when it is parsed
whole), so `{"task_id": 1}` or a string reward is a bad line, counted in
`bad_lines` with lines that are not JSON. The calls are checked when the
line is read whole; a reader that finds them invalid calls `discard()`.

The file may be growing (a run in progress): `refresh()` indexes only the
complete lines added since the last call, and starts over if the file was
replaced or truncated.
"""

from __future__ import annotations

import bisect
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from astuner.api import Trajectory

_CHUNK = 8 << 20
_CALLS = b',"calls":['
_TAIL = b'],"reward":'
_AGENT = b'"agent_name":"'
_decoder = json.JSONDecoder()


@dataclass(frozen=True, slots=True)
class Summary:
    """What the trajectory list shows for one line of a rollout file.

    `score` is the reward as one number (the sum of per-step rewards);
    `agent_rewards` the judge's reward per agent, when it scored agents on
    their own; `error` is the last line of the traceback; `agents` names the
    agents that made calls, in order of their first call; `turns` counts
    model calls.
    """

    line: int
    offset: int
    length: int
    trajectory_id: str
    task_id: str
    group_id: str
    reward: float | list[float] | None
    score: float | None
    agent_rewards: dict[str, float]
    is_success: bool | None
    madness: tuple[str, ...]
    error: str | None
    agents: tuple[str, ...]
    turns: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "trajectory_id": self.trajectory_id,
            "task_id": self.task_id,
            "group_id": self.group_id,
            "reward": self.reward,
            "score": self.score,
            "agent_rewards": dict(self.agent_rewards),
            "is_success": self.is_success,
            "madness": list(self.madness),
            "error": self.error,
            "agents": list(self.agents),
            "turns": self.turns,
        }


def _agent_names(line: bytes, start: int, end: int) -> list[str]:
    """Every call's `agent_name`, found by scanning for the key instead of parsing `calls`."""
    names = []
    pos = line.find(_AGENT, start, end)
    while pos >= 0:
        quote = pos + len(_AGENT) - 1
        close = line.find(b'"', quote + 1)
        while close > 0 and _escaped(line, close):
            close = line.find(b'"', close + 1)
        names.append(json.loads(line[quote : close + 1]))
        pos = line.find(_AGENT, close + 1, end)
    return names


def _escaped(line: bytes, quote: int) -> bool:
    """True when the quote at `quote` is preceded by an odd number of backslashes."""
    count = 0
    while line[quote - 1 - count] == 0x5C:
        count += 1
    return count % 2 == 1


def _fields_fast(line: bytes) -> tuple[dict[str, Any], list[str]] | None:
    calls = line.find(_CALLS)
    tail = line.rfind(_TAIL)
    if not line.startswith(b'{"trajectory_id":') or calls < 0 or tail < calls:
        return None
    try:
        head = json.loads(line[:calls] + b"}")
        rest = json.loads(b"{" + line[tail + 2 :])
        agents = _agent_names(line, calls, tail + 1)
    except ValueError:
        return None
    if not isinstance(rest, dict) or "tracker" not in rest:
        return None
    return {**head, **rest}, agents


def summarize(line: bytes, number: int, offset: int) -> Summary:
    """The summary of one rollout line.

    Raises ValueError (pydantic's ValidationError is one) when the line is
    not a trajectory: not JSON, or a field other than `calls` that does not
    validate against `Trajectory`; a line parsed whole is validated whole.
    """
    fast = _fields_fast(line)
    if fast is not None:
        fields, agents = fast
        trajectory = Trajectory.model_validate(fields)  # every field but `calls`, which `fields` lacks
    else:
        trajectory = Trajectory.model_validate_json(line)
        agents = [c.agent_name for c in trajectory.calls]
    reward = trajectory.reward
    score = float(sum(reward)) if isinstance(reward, list) else reward
    error = trajectory.error
    return Summary(
        line=number,
        offset=offset,
        length=len(line),
        trajectory_id=trajectory.trajectory_id,
        task_id=trajectory.task_id,
        group_id=trajectory.group_id,
        reward=reward,
        score=score,
        agent_rewards=trajectory.agent_rewards,
        is_success=trajectory.is_success,
        madness=tuple(trajectory.madness),
        error=error.strip().splitlines()[-1] if error and error.strip() else None,
        agents=tuple(dict.fromkeys(agents)),
        turns=len(agents),
    )


class RolloutIndex:
    """Summaries and byte ranges of a rollout file's complete lines, kept up to date."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.summaries: list[Summary] = []
        self.bad_lines: list[int] = []
        self._indexed = 0
        self._lines = 0
        self._identity: tuple[int, int] | None = None
        self._lock = threading.Lock()

    def refresh(self) -> list[Summary]:
        """Index what was appended since the last call; return every summary."""
        with self._lock:
            stat = os.stat(self.path)
            identity = (stat.st_dev, stat.st_ino)
            if identity != self._identity or stat.st_size < self._indexed:
                self.summaries, self.bad_lines = [], []
                self._indexed = self._lines = 0
                self._identity = identity
            if stat.st_size > self._indexed:
                self._scan(stat.st_size)
            return self.summaries

    def _scan(self, size: int) -> None:
        with self.path.open("rb") as handle:
            handle.seek(self._indexed)
            carry = b""
            start = self._indexed
            while start + len(carry) < size:
                chunk = handle.read(min(_CHUNK, size - start - len(carry)))
                if not chunk:
                    break
                data = carry + chunk if carry else chunk
                pos = 0
                while (end := data.find(b"\n", pos)) >= 0:
                    self._add(data[pos:end], start + pos)
                    pos = end + 1
                start += pos
                carry = data[pos:]
            self._indexed = start

    def _add(self, line: bytes, offset: int) -> None:
        number = self._lines
        self._lines += 1
        if not line.strip():
            return
        try:
            self.summaries.append(summarize(line, number, offset))
        except (ValueError, TypeError, AttributeError):
            self.bad_lines.append(number)

    def discard(self, line: int) -> None:
        """Drop line `line` from the summaries and count it as bad: a reader found its calls invalid.

        The list is replaced, not changed in place, so a page being built over it is not disturbed.
        """
        with self._lock:
            kept = [s for s in self.summaries if s.line != line]
            if len(kept) < len(self.summaries):
                self.summaries = kept
                bisect.insort(self.bad_lines, line)

    def is_bad(self, line: int) -> bool:
        """True when line `line` (0-based) was counted as bad."""
        pos = bisect.bisect_left(self.bad_lines, line)
        return pos < len(self.bad_lines) and self.bad_lines[pos] == line

    def find(self, line: int) -> Summary | None:
        """The summary of line number `line` (0-based), if that line is an indexed trajectory."""
        summaries = self.refresh()
        pos = bisect.bisect_left(summaries, line, key=lambda s: s.line)
        if pos < len(summaries) and summaries[pos].line == line:
            return summaries[pos]
        return None

    def read(self, summary: Summary) -> bytes:
        """The raw JSON line a summary describes."""
        with self.path.open("rb") as handle:
            handle.seek(summary.offset)
            return handle.read(summary.length)
