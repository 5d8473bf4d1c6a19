"""A torch run with its output in a file: a progress line while a step's rollouts run, and each
trajectory in `step_<n>.jsonl` (and `val_step_<n>.jsonl`) as soon as its run ends.

One step of the tiny model, one rollout at a time; every workflow notes, as
it starts, what the output file and the rollout files held then. A training
rollout then lasts until a progress line counting the runs done so far is in
the output (or 30 s: without such lines the test fails, slowly), so the test
does not depend on how fast a loaded machine runs the progress thread.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")

FLOWS = """
import asyncio
import json
import os
import time
from pathlib import Path

from astuner import JudgeOutput, Workflow, WorkflowOutput


def lines(pattern):
    return sum(1 for f in Path.cwd().glob(pattern) for line in f.read_text().splitlines() if line.strip())


def progress():
    output = Path(os.environ["NOTES_OUTPUT"]).read_text(errors="replace")
    return [l for l in output.splitlines() if "rollout progress" in l and "tag=step1" in l]


class Noted(Workflow):
    async def execute(self, workflow_task, model_tuner):
        note = {
            "group": workflow_task.group_id,
            "step_records": lines("launcher_record/*/*/rollouts/step_1.jsonl"),
            "val_records": lines("launcher_record/*/*/rollouts/val_step_1.jsonl"),
            "progress": progress(),
        }
        with open(os.environ["NOTES_FILE"], "a") as notes:
            notes.write(json.dumps(note) + "\\n")
        call = await model_tuner.chat([{"role": "user", "content": workflow_task.task.main_query}])
        if workflow_task.group_id.startswith("step1-"):
            counted = f"done={note['step_records']}/4"
            deadline = time.monotonic() + 30
            while not any(counted in l for l in progress()) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        return WorkflowOutput(response=call.content)


async def even_length(task, response):
    even = len(response or "") % 2 == 0
    return JudgeOutput(reward=1.0 if even else 0.0, is_success=even)
"""


def test_a_redirected_step_shows_its_progress_and_records_each_rollout_as_it_ends(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    (tmp_path / "noted.py").write_text(FLOWS, encoding="utf-8")
    block = {
        "experiment_name": "noted",
        "model": {"path": str(tiny_model_dir)},
        "task_reader": {"type": "arith", "arith": {"train_size": 2, "validation_size": 2}},
        "task_judge": {"judge_protocol": "noted->even_length"},
        "data": {"train_batch_size": 2},
        "rollout": {
            "agentscope_workflow": "noted->Noted",
            "num_repeat": 2,
            "max_env_worker": 1,
            "temperature": 1.0,
            "max_response_length_in_one_turn": 4,
            "val_kwargs": {"num_repeat": 1},
        },
        "trainer_common": {"total_training_steps": 1, "save_freq": 5, "test_freq": 1, "seed": 3},
        "torch": {"train_dtype": "float32", "num_threads": 1},
    }
    (tmp_path / "noted.yaml").write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    output, notes = tmp_path / "output.txt", tmp_path / "notes.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASTUNER_") and k != "FORCE_COLOR"}
    env.update({"ASTUNER_PROGRESS_EVERY_S": "0.3", "NOTES_OUTPUT": str(output), "NOTES_FILE": str(notes)})
    with output.open("w", encoding="utf-8") as out:
        code = subprocess.run(
            [sys.executable, "-m", "astuner", "run", "--conf", "noted.yaml", "--backbone", "torch"],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=240,
        ).returncode
    assert code == 0, output.read_text(encoding="utf-8")
    seen = [json.loads(line) for line in notes.read_text(encoding="utf-8").splitlines()]
    train = [note for note in seen if note["group"].startswith("step1-")]
    val = [note for note in seen if note["group"].startswith("val1-")]
    assert [note["step_records"] for note in train] == [0, 1, 2, 3], seen
    assert [note["val_records"] for note in val] == [0, 1], seen
    shown = train[-1]["progress"]
    for done in range(3):  # each earlier training rollout was counted while it ran
        assert any(f"done={done}/4" in line for line in shown), output.read_text(encoding="utf-8")
