"""docs/your-own-task.md: its files are the ones quoted, and its commands run, in order, as written.

The page builds a task from files a user writes (docs/own_task/, every one
quoted on the page) and runs it from base model to warm start to RL. Its
command blocks are marked like the tutorial's: `<!-- tested: run -->` runs
here, in one bash in a fresh folder holding only the quoted files (a
variable a command sets is there for the next, as in the reader's
terminal); `<!-- tested: serve -->` is started, fetched once and stopped;
`<!-- tested: full size -->` holds the commands behind the page's figures,
which must be the tested commands less their size-reducing options.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from types import ModuleType

import pytest

from astuner.companions import free_port
from astuner.record import read_trajectories

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "your-own-task.md"
FOLDER = REPO / "docs" / "own_task"
BLOCK = re.compile(r"<!-- tested: ([\w ]+?) -->\n```(?:console|bash)\n(.*?)```", re.DOTALL)
SNIPPET = re.compile(r"<!-- snippet: (\S+) -->")
SMALLER = {"--max-tasks", "--count", "--epochs"}
"""Options the page's commands take only to run small; the full-size commands leave them out, and
the `-o` overrides of the keys in SMALLER_KEYS."""
SMALLER_KEYS = {"trainer_common.total_training_steps", "data.train_batch_size", "rollout.num_repeat"}


def blocks(markdown: str) -> list[tuple[str, list[str]]]:
    """(marker, commands) of each marked block: a console block's `$ ` lines."""
    out = []
    for marker, body in BLOCK.findall(markdown):
        lines = body.strip().splitlines()
        out.append((marker, [line[2:] for line in lines if line.startswith("$ ")] or lines))
    return out


def commands(marker: str) -> list[str]:
    return [c for m, cs in blocks(PAGE.read_text()) if m == marker for c in cs]


def quoted_files() -> list[Path]:
    return [REPO / path for path in SNIPPET.findall(PAGE.read_text())]


def without_size_options(command: str) -> list[str]:
    """The words of `command` less the size-reducing options and their values."""
    words, kept = shlex.split(command), []
    pairs = iter(range(len(words)))
    for i in pairs:
        value = words[i + 1] if i + 1 < len(words) else ""
        if words[i] in SMALLER or (words[i] == "-o" and value.split("=")[0] in SMALLER_KEYS):
            next(pairs, None)
        else:
            kept.append(words[i])
    return kept


@pytest.fixture(scope="module")
def snippets() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_snippets", REPO / "docs" / "snippets.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quoted_files_equal_their_files(snippets: ModuleType) -> None:
    text = PAGE.read_text()
    assert snippets.render(text) == text, "run: python docs/snippets.py"


def test_the_page_quotes_every_file_of_its_folder() -> None:
    """The fresh folder of the run below holds the quoted files only, so the page must show them all."""
    written = {p for p in FOLDER.iterdir() if p.is_file() and p.name != "demonstrations.jsonl"}
    assert set(quoted_files()) == written


def test_every_command_block_says_how_it_is_tested() -> None:
    text = PAGE.read_text()
    fences = len(re.findall(r"^```(?:console|bash)$", text, re.MULTILINE))
    assert fences == len(blocks(text)) > 8
    assert {marker for marker, _ in blocks(text)} == {"run", "serve", "full size"}


def test_the_full_size_commands_are_the_tested_ones_at_full_size() -> None:
    full, tested = commands("full size"), commands("run")
    assert [shlex.split(c) for c in full] == [without_size_options(c) for c in tested]
    assert full != tested


def test_demonstrations_are_the_workflow_s_own_exchanges(tmp_path: Path) -> None:
    """Every demonstration asks as the workflow does, offers its tools, and is right by its tools."""
    shutil.copytree(FOLDER, tmp_path / "own_task", ignore=shutil.ignore_patterns("demonstrations.jsonl"))
    script = tmp_path / "own_task" / "make_demonstrations.py"
    subprocess.run([sys.executable, script], check=True, capture_output=True)
    sys.modules.pop("tools", None)  # another test's module of the same name must not answer
    sys.modules.pop("workflow", None)
    sys.path.insert(0, str(tmp_path / "own_task"))
    try:
        import tools
        import workflow
    finally:
        sys.path.remove(str(tmp_path / "own_task"))
        sys.modules.pop("tools", None)
        sys.modules.pop("workflow", None)
    lines = (tmp_path / "own_task" / "demonstrations.jsonl").read_text().splitlines()
    train = [json.loads(line) for line in (FOLDER / "pets_train.jsonl").read_text().splitlines()]
    validation = (FOLDER / "pets_validation.jsonl").read_text()
    assert len(lines) == len(train) == 28
    for line, row in zip(lines, train, strict=True):
        demo = json.loads(line)
        messages = demo["messages"]
        assert demo["tools"] == tools.TOOLS
        assert messages[0] == {"role": "system", "content": workflow.SYSTEM_PROMPT}
        assert messages[1] == {"role": "user", "content": row["question"]}
        for call, result in ((messages[2], messages[3]), (messages[4], messages[5])):
            function = call["tool_calls"][0]["function"]
            assert result["content"] == tools.FUNCTIONS[function["name"]](**json.loads(function["arguments"]))
        assert row["answer"] in messages[-1]["content"] and row["question"] not in validation


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASTUNER_")}
    # `astuner` and `python` of this environment, as after `source .venv/bin/activate`
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


class Terminal:
    """One bash that runs the page's commands one after another, as the reader's terminal does."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def run(self, command: str) -> tuple[int, str]:
        """The exit status and output of `command` (stdin closed, so it cannot eat the next one)."""
        assert self.process.stdin and self.process.stdout
        marker = f"__exit_{uuid.uuid4().hex}__"
        self.process.stdin.write(f"{{ {command}\n}} < /dev/null\nprintf '\\n{marker}%d\\n' $?\n")
        self.process.stdin.flush()
        output = []
        for line in self.process.stdout:
            if line.startswith(marker):
                return int(line[len(marker) :]), "".join(output)
            output.append(line)
        raise AssertionError(f"bash ended during: {command}\n{''.join(output)[-3000:]}")

    def close(self) -> None:
        assert self.process.stdin
        self.process.stdin.close()
        self.process.wait(timeout=30)


def _serve_once(command: str, cwd: Path, env: dict[str, str]) -> list[dict]:
    """Start the viewer, return the runs its API lists, stop it."""
    port = free_port()
    server = subprocess.Popen(
        [*shlex.split(command), "--port", str(port)],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs", timeout=5) as page:
                    return json.load(page)["runs"]
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"{command} did not serve: {server.stderr.read()}") from None
                time.sleep(0.5)
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_page_runs_from_an_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "own_task").mkdir()
    for file in quoted_files():  # the files the reader writes from the page
        shutil.copy(file, tmp_path / "own_task" / file.name)
    env = _environment()
    terminal, ran, served = Terminal(tmp_path, env), [], []
    try:
        for marker, lines in blocks(PAGE.read_text()):
            for command in lines:
                if marker == "run":
                    status, output = terminal.run(command)
                    assert status == 0, f"$ {command}\n{output[-6000:]}"
                    ran.append(command)
                elif marker == "serve":
                    served = _serve_once(command, tmp_path, env)
                    ran.append(command)
    finally:
        terminal.close()
    heads = [c.split()[1] if c.startswith(("astuner ", "python ")) else c.split("=")[0] for c in ran]
    first = ["data", "run", "eval", "own_task/make_demonstrations.py", "sft"]
    assert heads == [*first, "SFT", "eval", "run", "eval", "logview"]

    records = tmp_path / "launcher_record"
    # the debug look: the configured number of tasks, both tools offered, no rollout failed
    (debug,) = (records / "own_task").glob("*/rollouts/debug.jsonl")
    looked = read_trajectories(debug)
    assert len(looked) == 2
    for t in looked:
        assert t.error is None, t.error
        assert [tool["function"]["name"] for tool in t.calls[0].tools or []] == ["find_owner", "find_city"]
    # three evaluations (base, warm start, RL), each on the page's number of validation tasks
    evaluations = sorted((records / "own_task_eval").glob("*/eval_summary.json"))
    summaries = [json.loads(p.read_text()) for p in evaluations]
    assert [s["tasks"] for s in summaries] == [4, 4, 4]
    assert summaries[0]["checkpoint"] is None and summaries[0]["model"] == "builtin:smollm2-135m-instruct"
    # the warm start: the demonstrations written, tokens trained, a checkpoint to start RL from
    assert len((tmp_path / "own_task" / "demonstrations.jsonl").read_text().splitlines()) == 8
    (sft_checkpoint,) = (records / "own_task-sft").glob("*/checkpoints/step_*")
    assert (sft_checkpoint / "config.json").is_file()
    sft_metrics = (sft_checkpoint.parent.parent / "metrics.jsonl").read_text().splitlines()
    assert sum(json.loads(line)["sft/tokens_trained"] for line in sft_metrics) > 0
    assert summaries[1]["checkpoint"] == str(sft_checkpoint.resolve())
    # RL started from the warm start, two steps, and its checkpoint is what was evaluated last
    (rl_checkpoint,) = (records / "own_task").glob("*/checkpoints/step_2")
    rl_run = rl_checkpoint.parent.parent
    steps = [json.loads(line)["step"] for line in (rl_run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    assert str(sft_checkpoint.resolve()) in (rl_run / "config.yaml").read_text()
    assert summaries[2]["checkpoint"] == str(rl_checkpoint.resolve())
    # the viewer lists every run of the page: the debug look, three evaluations, sft, RL
    assert sorted(run["id"].split("/")[0] for run in served) == ["own_task"] * 2 + ["own_task-sft"] + [
        *["own_task_eval"] * 3
    ]
