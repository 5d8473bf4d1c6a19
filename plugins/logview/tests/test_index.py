"""The rollout file index: summaries without parsing `calls`, and files that grow or get replaced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from astuner_logview.index import RolloutIndex, summarize

from astuner.core.trajectory import LLMCall, Trajectory
from astuner.record import append_trajectories, read_trajectories


def expected(t: Trajectory) -> dict:
    score = sum(t.reward) if isinstance(t.reward, list) else t.reward
    return {
        "trajectory_id": t.trajectory_id,
        "task_id": t.task_id,
        "group_id": t.group_id,
        "reward": t.reward,
        "score": score,
        "agent_rewards": t.agent_rewards,
        "is_success": t.is_success,
        "madness": list(t.madness),
        "error": t.error.strip().splitlines()[-1] if t.error else None,
        "agents": list(dict.fromkeys(c.agent_name for c in t.calls)),
        "turns": len(t.calls),
    }


def summary_fields(line: bytes) -> dict:
    fields = summarize(line, 0, 0).as_dict()
    del fields["line"]
    return fields


def test_summaries_of_real_lines_match_the_parsed_trajectories(calc_run: Path) -> None:
    path = calc_run / "rollouts" / "debug.jsonl"
    lines = path.read_bytes().splitlines()
    for line, trajectory in zip(lines, read_trajectories(path), strict=True):
        assert summary_fields(line) == expected(trajectory)


TRICKY = [
    # Marker text inside strings is escaped JSON and must not confuse the scan.
    Trajectory(
        trajectory_id='t"1',
        task_id='],"reward": 5, "calls":[',
        calls=[
            LLMCall(
                agent_name='ag"ent\\',
                messages=[{"role": "user", "content": '],"reward":9,"tracker":{} "agent_name":"x"'}],
            ),
            LLMCall(agent_name="second"),
        ],
        reward=0.5,
        is_success=True,
    ),
    # The marker as real JSON structure after the top-level reward: the whole line is parsed instead.
    Trajectory(trajectory_id="t2", reward=1.0, metadata={"nested": [[1], {"x": [2]}], "reward": 3}),
    Trajectory(
        trajectory_id="t3",
        calls=[LLMCall(agent_name="a"), LLMCall(agent_name="b"), LLMCall(agent_name="a")],
        reward=[0.25, 0.5],
        agent_rewards={"a": 0.25, "b": 0.5, 'c"': -1.0},
        madness=["nonsense: loop"],
        error="Traceback (most recent call last):\n  ...\nValueError: bad\n",
    ),
    Trajectory(trajectory_id="t4", reward=None, metadata={"workflow_output": {"reward": 2}}),
    # An auxiliary model's calls (a judge's) are kept apart: neither an agent nor a turn of the run.
    Trajectory(
        trajectory_id="t5",
        calls=[LLMCall(agent_name="default")],
        auxiliary_calls=[LLMCall(agent_name="critic", trainable=False)] * 2,
        reward=1.0,
    ),
]


@pytest.mark.parametrize("trajectory", TRICKY, ids=lambda t: t.trajectory_id)
def test_summaries_of_tricky_lines(trajectory: Trajectory) -> None:
    line = trajectory.model_dump_json().encode()
    assert summary_fields(line) == expected(trajectory)


def test_lines_in_another_key_order_are_parsed_whole() -> None:
    t = TRICKY[2]
    data = json.loads(t.model_dump_json())
    reordered = json.dumps({k: data[k] for k in reversed(list(data))}).encode()
    assert summary_fields(reordered) == expected(t)


def test_index_follows_a_growing_file(tmp_path: Path) -> None:
    path = tmp_path / "step_1.jsonl"
    append_trajectories(path, [Trajectory(trajectory_id=f"a{i}", reward=float(i)) for i in range(3)])
    index = RolloutIndex(path)
    assert [s.trajectory_id for s in index.refresh()] == ["a0", "a1", "a2"]
    half = Trajectory(trajectory_id="a3", reward=3.0).model_dump_json()
    with path.open("a", encoding="utf-8") as out:
        out.write(half[:20])  # a line being written is not indexed yet
    assert len(index.refresh()) == 3
    with path.open("a", encoding="utf-8") as out:
        out.write(half[20:] + "\n\nnot json\n")
    summaries = index.refresh()
    assert [s.trajectory_id for s in summaries] == ["a0", "a1", "a2", "a3"]
    assert index.bad_lines == [5]
    assert json.loads(index.read(summaries[3]))["trajectory_id"] == "a3"
    assert index.find(3) == summaries[3]
    assert index.find(4) is None


def test_index_starts_over_when_the_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "step_1.jsonl"
    append_trajectories(path, [Trajectory(trajectory_id=f"a{i}") for i in range(5)])
    index = RolloutIndex(path)
    assert len(index.refresh()) == 5
    path.write_text(Trajectory(trajectory_id="b0").model_dump_json() + "\n", encoding="utf-8")
    assert [s.trajectory_id for s in index.refresh()] == ["b0"]
    replacement = tmp_path / "new.jsonl"
    append_trajectories(replacement, [Trajectory(trajectory_id=f"c{i}") for i in range(7)])
    replacement.replace(path)
    assert [s.trajectory_id for s in index.refresh()] == [f"c{i}" for i in range(7)]


def test_lines_across_read_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("astuner_logview.index._CHUNK", 97)
    path = tmp_path / "step_1.jsonl"
    trajectories = [Trajectory(trajectory_id=f"t{i}", task_id="x" * (i * 13)) for i in range(40)]
    append_trajectories(path, trajectories)
    summaries = RolloutIndex(path).refresh()
    assert [s.trajectory_id for s in summaries] == [t.trajectory_id for t in trajectories]
    assert [s.offset for s in summaries] == [
        sum(len(t.model_dump_json()) + 1 for t in trajectories[:i]) for i in range(40)
    ]
