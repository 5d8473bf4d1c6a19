"""`RunRecords` reads a run folder as the kernel writes it, never outside its bounds, and what trained."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from astuner.core import advantages
from astuner.core.advantages import compute_advantages
from astuner.core.merge import merge_trajectory
from astuner.core.trajectory import LLMCall, Trajectory
from astuner.hookspecs import hookimpl
from astuner.plugins import Plugins
from astuner.record import append_rows, append_trajectories
from astuner.run_records import RunRecords
from astuner.run_status import mark_ended

CONFIG = """\
astuner:
  experiment_name: calc
  model: {path: /models/qwen}
  trainer_common: {algorithm: {adv_estimator: rloo}}
  rollout: {gamma: 0.9}
"""


def _call(index: int, prompt: list[int], response: list[int], agent: str = "default") -> LLMCall:
    return LLMCall(
        index=index,
        agent_name=agent,
        prompt_ids=prompt,
        response_ids=response,
        response_logprobs=[-0.5] * len(response),
    )


def _trajectory(tid: str, reward: float, group: str = "task-1") -> Trajectory:
    calls = [
        _call(0, [1, 2, 3], [10, 11]),
        _call(1, [1, 2, 3, 10, 11, 4, 5], [12]),  # extends call 0
        _call(2, [1, 2, 3, 99], [13]),  # parts from sample 0 at token 3
    ]
    return Trajectory(trajectory_id=tid, task_id="1", group_id=group, reward=reward, calls=calls)


@pytest.fixture
def run(tmp_path: Path) -> Path:
    folder = tmp_path / "records" / "calc" / "20260101-120000"
    (folder / "rollouts").mkdir(parents=True)
    (folder / "config.yaml").write_text(CONFIG)
    append_rows(folder / "metrics.jsonl", [{"step": 1, "train/reward_mean": 0.5}, {"step": 2, "loss": 1.0}])
    mark_ended(folder, "finished")
    return folder


def test_a_run_reads_back_its_status_settings_and_metrics(run: Path) -> None:
    records = RunRecords(run)
    assert records.is_run()
    assert records.status().state == "finished"
    assert records.config()["model"] == {"path": "/models/qwen"}
    assert records.advantage_settings() == ("rloo", 0.9)
    assert [row["step"] for row in records.metrics()] == [1, 2]
    assert records.health() == records.health(records.metrics())


def test_a_check_the_runs_config_acknowledged_is_marked_so(run: Path) -> None:
    """The viewer's health list says which check held by the config's choice (`health.acknowledged`)."""
    cut = [{"step": s, "train/truncation_rate": 1.0, "train/zero_adv_group_frac": 0.9} for s in (1, 2)]
    append_rows(run / "metrics.jsonl", cut)
    by_check = {entry["check"]: entry["acknowledged"] for entry in RunRecords(run).health()}
    assert by_check == {"truncation": False, "zero_advantage_groups": False}
    (run / "config.yaml").write_text(CONFIG + "  health: {acknowledged: [truncation]}\n")
    by_check = {entry["check"]: entry["acknowledged"] for entry in RunRecords(run).health()}
    assert by_check == {"truncation": True, "zero_advantage_groups": False}
    (run / "config.yaml").write_text(CONFIG + "  health: [truncation]\n")  # not the form astuner writes
    assert not any(entry["acknowledged"] for entry in RunRecords(run).health())


def test_a_folder_without_records_reads_as_empty_and_unknown(tmp_path: Path) -> None:
    records = RunRecords(tmp_path)
    assert not records.is_run()
    assert records.status().state == "unknown"
    assert records.config() == {} and records.metrics() == [] and records.trajectory_files() == []
    assert records.advantage_settings() == ("grpo", 1.0)


def test_a_crafted_config_reads_as_missing(run: Path) -> None:
    bomb = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    bomb += [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]" for i in range(8)]
    (run / "config.yaml").write_text("\n".join(bomb) + "\nastuner: {model: {path: *i}}\n")
    assert RunRecords(run).config() == {}
    (run / "config.yaml").write_text("- not\n- a mapping\n")
    assert RunRecords(run).config() == {}


def test_rollout_files_are_listed_by_step_then_by_name(run: Path) -> None:
    for name in ("step_10.jsonl", "step_2.jsonl", "debug.jsonl", "notes.txt"):
        (run / "rollouts" / name).write_text("")
    (run / "rollouts" / "step_3.jsonl").mkdir()
    files = RunRecords(run).trajectory_files()
    assert [f.name for f in files] == ["step_2.jsonl", "step_10.jsonl", "debug.jsonl"]
    assert [RunRecords.step_of(f) for f in files] == [2, 10, None]


def test_nothing_is_read_through_a_link_that_leads_out_of_the_bounds(run: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "rollouts").mkdir(parents=True)
    (outside / "rollouts" / "step_1.jsonl").write_text("")
    (outside / "config.yaml").write_text(CONFIG)
    (outside / "secret.txt").write_text("key")
    other = run.parent / "20260102-120000"
    other.mkdir()
    for name in ("config.yaml", "rollouts", "secret.txt"):
        os.symlink(outside / name, other / name)
    records = RunRecords(other, bounds=run.parent)
    assert not records.is_run()
    assert records.config() == {} and records.trajectory_files() == [] and records.file("secret.txt") is None
    # A link that stays inside the bounds is followed: a run's config shared with its sibling.
    os.remove(other / "config.yaml")
    os.symlink(run / "config.yaml", other / "config.yaml")
    assert records.is_run() and records.config()["experiment_name"] == "calc"
    assert RunRecords(other).config() == {}  # bounded by the run folder itself, the sibling is outside


def test_a_trajectory_line_reads_back_with_its_repeated_messages(run: Path) -> None:
    trajectory = _trajectory("t0", 1.0)
    history = [{"role": "user", "content": "2+2?"}]
    trajectory.calls[0].messages = history
    trajectory.calls[1].messages = [*history, {"role": "assistant", "content": "4"}]
    append_trajectories(run / "rollouts" / "step_1.jsonl", [trajectory])
    (file,) = RunRecords(run).trajectory_files()
    line = file.read_bytes()
    assert b'"astuner.repeats"' in line  # the record keeps the shared message once
    assert RunRecords.read_trajectory(line) == trajectory
    with pytest.raises(ValueError):
        RunRecords.read_trajectory(b'{"task_id": 1}')


def test_what_trained_is_what_the_trainer_computes(run: Path) -> None:
    group = [_trajectory("t0", 1.0), _trajectory("t1", 0.0)]
    estimator, gamma = RunRecords(run).advantage_settings()
    trained = RunRecords.what_trained(group[0], group, estimator, gamma)
    samples, report = merge_trajectory(group[0])
    adv = compute_advantages(group, samples, estimator=advantages.rloo, gamma=gamma)
    assert trained.samples == [
        {**s.model_dump(), "trained_tokens": s.num_trained_tokens} for s in adv.samples
    ]
    assert [s["loss_mask"] for s in trained.samples] == [[0, 0, 0, 1, 1, 0, 0, 1], [0, 0, 0, 0, 1]]
    assert trained.advantages == {0: pytest.approx(1.0), 1: pytest.approx(1.0), 2: pytest.approx(1.0)}
    assert trained.step_advantages == adv.step_advantages["t0"]
    assert (trained.estimator, trained.gamma, trained.group_size) == ("rloo", 0.9, 2)
    assert trained.merge == {
        "calls": 3,
        "samples": 2,
        "tokens_trained": report.tokens_trained,
        "tokens_unmerged": report.tokens_unmerged,
        "drifts": 0,
    }
    (brk,) = trained.breaks
    assert (brk["call"], brk["sample"], brk["previous_call"], brk["position"]) == (2, 0, 1, 3)
    assert brk["note"] == report.breaks[0].describe()
    assert trained.advantage_error is None and not trained.zero_variance()
    json.dumps(trained.samples + trained.breaks)  # plain data, ready for a page


def test_advantages_that_cannot_be_computed_leave_the_samples_and_say_why() -> None:
    trajectory = _trajectory("t0", 1.0)
    trained = RunRecords.what_trained(trajectory, [trajectory], estimator="no-such-estimator")
    assert trained.advantage_error and "no-such-estimator" in trained.advantage_error
    assert trained.advantages == {} and trained.step_advantages is None
    assert [s["advantages"] for s in trained.samples] == [[0.0] * 8, [0.0] * 5]


def test_what_trained_finds_a_plugins_estimator_by_name() -> None:
    class Halves:
        @hookimpl
        def register_advantage_estimators(self, register):
            register("halves", lambda: lambda scores, group, eps: (scores / 2, np.ones_like(scores)))

    plugins = Plugins(load_entry_points=False)
    plugins.add(Halves(), name="halves")
    trajectory = _trajectory("t0", 1.0)
    trained = RunRecords.what_trained(trajectory, [trajectory], "halves", plugins=plugins)
    assert trained.advantage_error is None and trained.advantages[0] == pytest.approx(0.5)


def test_zero_variance_is_told_per_agent_when_the_judge_scores_agents() -> None:
    def two_agents(tid: str, b_reward: float) -> Trajectory:
        calls = [_call(0, [1], [2], agent="a"), _call(1, [5], [6], agent="b")]
        return Trajectory(
            trajectory_id=tid, group_id="g", calls=calls, reward=1.0, agent_rewards={"a": 1.0, "b": b_reward}
        )

    group = [two_agents("t0", 1.0), two_agents("t1", 0.0)]
    trained = RunRecords.what_trained(group[0], group)
    assert trained.zero_variance("a") and not trained.zero_variance("b")
    assert not trained.zero_variance()  # agent b learned something
    flat = [two_agents("t0", 1.0), two_agents("t1", 1.0)]
    assert RunRecords.what_trained(flat[0], flat).zero_variance()
    same = [_trajectory("t0", 1.0), _trajectory("t1", 1.0)]
    assert RunRecords.what_trained(same[0], same).zero_variance()


def test_a_hub_name_not_in_the_local_cache_is_not_fetched(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(FileNotFoundError, match="local HuggingFace cache"):
        RunRecords.decoding_tokenizer("nobody/no-such-model")


def test_importing_it_leaves_numpy_for_the_first_trained_view() -> None:
    heavy = "{'numpy', 'fastapi', 'transformers'}"
    probe = f"import sys, astuner.run_records; print(sorted({heavy} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
