"""A command run with its output in a file, watched from inside: what a user tailing it saw mid-run.

For the tests of progress off a terminal (`astuner run --backbone debug`,
`astuner eval`): `redirected_run` runs the command line in a child process
with a scripted engine (`rollout.engine: scripted`, which answers "13"), in a
folder holding `slow_workflow.py` (`SLOW_WORKFLOW`), a saved tokenizer
(`tok/`) and the caller's `slow.yaml`, its stdout and stderr redirected to
one file. Run one rollout at a time: each rollout's workflow notes what the
output file and the rollout files held as it started, then lasts until a
progress line counting the runs done so far is in the output (or 30 s, so a
run without such lines ends and its test fails). Waiting on the line, not
for a fixed time, keeps the tests from depending on how fast a loaded
machine runs the progress thread.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from astuner.rollout.progress import PROGRESS_ENV

# The workflow `slow_workflow->slow`, which notes what it saw and waits for its progress line.
SLOW_WORKFLOW = """\
import asyncio
import json
import os
import time
from pathlib import Path

from astuner import WorkflowOutput


def progress_lines():
    output = Path(os.environ["PROGRESS_TEST_OUTPUT"]).read_text(encoding="utf-8", errors="replace")
    return [line for line in output.splitlines() if "rollout progress" in line]


async def slow(task, model):
    records = [line for f in Path.cwd().glob("launcher_record/*/*/rollouts/*.jsonl")
               for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
    seen = {"progress_lines": progress_lines(), "records": len(records)}
    with open(os.environ["PROGRESS_TEST_SEEN"], "a", encoding="utf-8") as notes:
        notes.write(json.dumps(seen) + "\\n")
    call = await model.chat([{"role": "user", "content": task["question"]}])
    counted = f"done={len(records)}/{os.environ['PROGRESS_TEST_TOTAL']}"
    deadline = time.monotonic() + 30
    while not any(counted in line for line in progress_lines()) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return WorkflowOutput(response=call.content)
"""


# The child process: the command line with the scripted engine added to the plugins.
CHILD = """\
import json
import os
from types import SimpleNamespace

from astuner import hookimpl
from astuner.cli import make_app
from astuner.core.tokenizer import ChatTokenizer
from astuner.plugins import Plugins
from astuner.testing.engines import ScriptedEngine
from astuner.testing.tokenizers import qwen25_tokenizer


def make_engine(model):
    engine = ScriptedEngine(ChatTokenizer(qwen25_tokenizer()), lambda prompt: "13")
    engine.tokenizer_path = os.environ["PROGRESS_TEST_TOKENIZER"]
    return engine


plugins = Plugins(load_entry_points=os.environ["PROGRESS_TEST_ENTRY_POINTS"] == "1")
plugins.add(
    SimpleNamespace(register_engines=hookimpl(lambda register: register("scripted", make_engine))),
    name="scripted_engine",
)
make_app(plugins)(args=json.loads(os.environ["PROGRESS_TEST_ARGS"]), prog_name="astuner")
"""


@dataclass
class RedirectedRun:
    """What each rollout saw as it started (`notes`, in the order they ran) and the whole output."""

    notes: list[dict[str, object]]
    output: str

    def check_progress(self, tag: str, total: int) -> None:
        """Assert that by the last rollout's start each earlier one was counted in a line while it
        ran, that the lines carry the batch's figures, and that none came before the first interval."""
        lines = self.notes[-1]["progress_lines"]
        assert isinstance(lines, list) and lines, self.output
        for done in range(total - 1):
            assert any(f"done={done}/{total}" in line for line in lines), self.output
        for field in (f"tag={tag}", "reward_mean=", "tokens_per_s=", "errors=0", "elapsed_s="):
            assert field in lines[-1], lines
        elapsed = [float(line.split("elapsed_s=")[1].split()[0]) for line in lines]
        assert elapsed[0] >= 0.25 and elapsed == sorted(elapsed), lines


def redirected_run(
    folder: Path, args: list[str], config: Callable[[Path], str], total: int, *, entry_points: bool = False
) -> RedirectedRun:
    """Run `astuner ARGS` (`--conf slow.yaml` among them) in `folder`, its output in a file.

    `config(tokenizer_folder)` is the text of `slow.yaml`; `total` the number
    of rollouts the command runs, one at a time; `entry_points`: load the
    installed plugins too. A line every 0.3 s (`ASTUNER_PROGRESS_EVERY_S`);
    the developer's `ASTUNER_*` settings and forced colours are left out, so
    the output is what a redirected run writes.
    """
    from astuner.testing.tokenizers import qwen25_tokenizer

    qwen25_tokenizer().save_pretrained(folder / "tok")
    (folder / "child.py").write_text(CHILD, encoding="utf-8")
    (folder / "slow_workflow.py").write_text(SLOW_WORKFLOW, encoding="utf-8")
    (folder / "slow.yaml").write_text(config(folder / "tok"), encoding="utf-8")
    output, seen = folder / "output.txt", folder / "seen.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASTUNER_")}
    env.pop("FORCE_COLOR", None)
    env.pop("TTY_COMPATIBLE", None)
    env.update(
        {
            PROGRESS_ENV: "0.3",
            "PROGRESS_TEST_OUTPUT": str(output),
            "PROGRESS_TEST_SEEN": str(seen),
            "PROGRESS_TEST_TOTAL": str(total),
            "PROGRESS_TEST_TOKENIZER": str(folder / "tok"),
            "PROGRESS_TEST_ENTRY_POINTS": "1" if entry_points else "0",
            "PROGRESS_TEST_ARGS": json.dumps(args),
        }
    )
    with output.open("w", encoding="utf-8") as out:
        code = subprocess.run(
            [sys.executable, str(folder / "child.py")],
            cwd=folder,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=300,
        ).returncode
    text = output.read_text(encoding="utf-8")
    assert code == 0, text
    notes = [json.loads(line) for line in seen.read_text(encoding="utf-8").splitlines()]
    assert len(notes) == total, text
    return RedirectedRun(notes, text)
