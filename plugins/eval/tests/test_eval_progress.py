"""`astuner eval` with its output in a file says how its rollouts go while they run, and writes each
one to `rollouts/eval.jsonl` as it ends.

A real `astuner eval` in a child process (the installed plugins, and a
scripted engine), its stdout and stderr redirected to one file, one rollout
at a time, with a workflow that takes about a second. Each rollout's
workflow, before it sleeps, notes what the output file and the rollout file
held at that moment; the test reads those notes: what a user tailing the
files would have seen mid-run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from astuner.rollout.progress import PROGRESS_ENV

ROLLOUTS = 4

CHILD = textwrap.dedent(
    """
    import sys
    from types import SimpleNamespace

    from astuner import hookimpl
    from astuner.cli import make_app
    from astuner.core.tokenizer import ChatTokenizer
    from astuner.plugins import Plugins
    from astuner.testing.engines import ScriptedEngine
    from astuner.testing.tokenizers import qwen25_tokenizer


    def make_engine(model):
        engine = ScriptedEngine(ChatTokenizer(qwen25_tokenizer()), lambda prompt: "13")
        engine.tokenizer_path = sys.argv[2]
        return engine


    plugins = Plugins()
    plugins.add(
        SimpleNamespace(register_engines=hookimpl(lambda register: register("scripted", make_engine))),
        name="scripted_engine",
    )
    make_app(plugins)(
        args=["eval", "--conf", sys.argv[1], "--max-tasks", sys.argv[3]], prog_name="astuner"
    )
    """
)

WORKFLOW = textwrap.dedent(
    """
    import asyncio
    import json
    import os
    from pathlib import Path

    from astuner import WorkflowOutput


    async def slow(task, model):
        output = Path(os.environ["PROGRESS_TEST_OUTPUT"]).read_text(encoding="utf-8", errors="replace")
        records = [line for f in Path.cwd().glob("launcher_record/*/*/rollouts/*.jsonl")
                   for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
        seen = {"progress_lines": [l for l in output.splitlines() if "rollout progress" in l],
                "records": len(records)}
        with open(os.environ["PROGRESS_TEST_SEEN"], "a", encoding="utf-8") as notes:
            notes.write(json.dumps(seen) + "\\n")
        call = await model.chat([{"role": "user", "content": task["question"]}])
        await asyncio.sleep(1.0)
        return WorkflowOutput(response=call.content)
    """
)


@pytest.fixture(scope="module")
def redirected_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The notes of each rollout (in the order they ran) and the run's whole output, in a file."""
    from astuner.testing.tokenizers import qwen25_tokenizer

    folder = tmp_path_factory.mktemp("redirected")
    qwen25_tokenizer().save_pretrained(folder / "tok")
    (folder / "child.py").write_text(CHILD, encoding="utf-8")
    (folder / "slow_workflow.py").write_text(WORKFLOW, encoding="utf-8")
    (folder / "slow.yaml").write_text(
        "astuner:\n"
        f"  model: {{path: '{folder / 'tok'}'}}\n"
        "  task_reader: {type: arith}\n"
        "  rollout: {agentscope_workflow: 'slow_workflow->slow', engine: scripted, max_env_worker: 1}\n",
        encoding="utf-8",
    )
    output, seen = folder / "output.txt", folder / "seen.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASTUNER_")}
    env.update({PROGRESS_ENV: "0.3", "PROGRESS_TEST_OUTPUT": str(output), "PROGRESS_TEST_SEEN": str(seen)})
    env.pop("FORCE_COLOR", None)
    env.pop("TTY_COMPATIBLE", None)
    with output.open("w", encoding="utf-8") as out:
        code = subprocess.run(
            [sys.executable, str(folder / "child.py"), "slow.yaml", str(folder / "tok"), str(ROLLOUTS)],
            cwd=folder,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=180,
        ).returncode
    text = output.read_text(encoding="utf-8")
    assert code == 0, text
    notes = [json.loads(line) for line in seen.read_text(encoding="utf-8").splitlines()]
    assert len(notes) == ROLLOUTS, text
    return {"notes": notes, "output": text}


def test_progress_lines_come_at_a_steady_interval_while_the_rollouts_run(
    redirected_run: dict[str, object],
) -> None:
    notes = redirected_run["notes"]
    assert isinstance(notes, list)
    # The last rollout starts after the first three took a second each: with a line every 0.3 s,
    # several lines were in the file by then, counting the rollouts done so far.
    lines = notes[-1]["progress_lines"]
    assert len(lines) >= 5, redirected_run["output"]
    for done in range(ROLLOUTS - 1):
        assert any(f"done={done}/{ROLLOUTS}" in line for line in lines), lines
    for field in ("tag=eval", "reward_mean=", "tokens_per_s=", "errors=0", "elapsed_s="):
        assert field in lines[-1], lines
    assert not notes[0]["progress_lines"]  # none before the interval


def test_each_trajectory_is_in_the_rollout_file_as_soon_as_its_run_ends(
    redirected_run: dict[str, object],
) -> None:
    notes = redirected_run["notes"]
    assert isinstance(notes, list)
    assert [note["records"] for note in notes] == list(range(ROLLOUTS)), notes
