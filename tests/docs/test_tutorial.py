"""docs/tutorial.md: its quoted code equals the files, and its commands run, in order, as written.

A command block is preceded by a marker saying how it is exercised:
`<!-- tested: run -->` (run here, in one fresh folder, in document order),
`<!-- tested: serve -->` (a server: started here, fetched once, stopped by
its PID), or `<!-- tested by: X -->` (another test or the CI runs it; here
we check that X really holds the command).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import ModuleType

import pytest

from astuner.companions import free_port
from astuner.record import read_trajectories

REPO = Path(__file__).resolve().parents[2]
TUTORIAL = REPO / "docs" / "tutorial.md"
BLOCK = re.compile(r"<!-- (tested: \w+|tested by: [^>]+?) -->\n```(?:console|bash)\n(.*?)```", re.DOTALL)


def blocks(markdown: str) -> list[tuple[str, list[str]]]:
    """(marker, commands) of each marked block; a console block's commands are its `$ ` lines."""
    out = []
    for marker, body in BLOCK.findall(markdown):
        lines = body.strip().splitlines()
        commands = [line[2:] for line in lines if line.startswith("$ ")] or lines
        out.append((marker, commands))
    return out


@pytest.fixture(scope="module")
def snippets() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_snippets", REPO / "docs" / "snippets.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quoted_code_equals_its_files(snippets: ModuleType) -> None:
    assert "<!-- snippet: examples/tune_api/train_math.py -->" in TUTORIAL.read_text()
    assert snippets.stale() == [], "run: python docs/snippets.py"


def test_a_changed_file_makes_its_quote_stale(snippets: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "example.py").write_text("print('v1')\n")
    doc = tmp_path / "docs" / "page.md"
    doc.write_text("<!-- snippet: example.py -->\n```python\nprint('v0')\n```\n<!-- /snippet -->\n")
    (tmp_path / "README.md").write_text("nothing quoted\n")
    assert snippets.stale(tmp_path) == [doc]
    doc.write_text(snippets.render(doc.read_text(), tmp_path))
    assert "print('v1')" in doc.read_text() and snippets.stale(tmp_path) == []


def test_every_command_block_says_how_it_is_tested() -> None:
    text = TUTORIAL.read_text()
    fences = len(re.findall(r"^```(?:console|bash)$", text, re.MULTILINE))
    assert fences == len(blocks(text)) > 5


def test_commands_tested_elsewhere_are_there() -> None:
    readme = (REPO / "README.md").read_text()
    install = re.search(r"<!-- ci:install -->\n```bash\n(.*?)\n```", readme, re.DOTALL)
    assert install
    for marker, commands in blocks(TUTORIAL.read_text()):
        if marker == "tested by: README ci:install":
            assert commands == [install.group(1)]
        elif marker.startswith("tested by: "):
            test_file = (REPO / marker.removeprefix("tested by: ")).read_text()
            for command in commands:
                for word in shlex.split(command)[1:]:
                    assert word in test_file, (command, marker)


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASTUNER_")}
    # `astuner` and `python` of this environment, as after `source .venv/bin/activate`
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _serve_once(command: str, cwd: Path, env: dict[str, str]) -> None:
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
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as page:
                    assert page.status == 200
                    return
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"{command} did not serve: {server.stderr.read()}") from None
                time.sleep(0.5)
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_the_tutorial_runs_from_an_empty_folder(tmp_path: Path) -> None:
    env = _environment()
    ran, outputs = [], []
    for marker, commands in blocks(TUTORIAL.read_text()):
        for command in commands:
            if marker == "tested: run":
                result = subprocess.run(
                    command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800
                )
                output = f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
                assert result.returncode == 0, f"$ {command}\n{output}"
                ran.append(command)
                outputs.append(result.stdout)
            elif marker == "tested: serve":
                _serve_once(command, tmp_path, env)
                ran.append(command)
    assert [c.split()[1] for c in ran] == ["init", "data", "run", "run", "eval", "logview"]

    # What the tutorial says each step leaves behind.
    assert "astuner run --conf demo/demo.yaml --backbone debug" in outputs[0]  # init's next step
    records = tmp_path / "launcher_record"
    (debug_run,) = (records / "demo").glob("*/rollouts/debug.jsonl")
    debugged = read_trajectories(debug_run)
    assert len(debugged) == 4  # debug.debug_first_n_tasks
    for t in debugged:
        assert t.error is None, t.error
        assert t.reward in (0.0, 1.0)
        assert t.calls[0].prompt_ids and len(t.calls[0].response_logprobs) == len(t.calls[0].response_ids)
    # the model saw its one tool
    assert [tool["function"]["name"] for tool in debugged[0].calls[0].tools or []] == ["calculate"]
    (checkpoint,) = (records / "demo").glob("*/checkpoints/step_2")
    assert (checkpoint / "config.json").is_file()
    run = checkpoint.parent.parent
    assert (run / "tensorboard").is_dir() and (run / "rollouts" / "step_2.jsonl").is_file()
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    (summary,) = (records / "demo_eval").glob("*/eval_summary.json")
    evaluated = json.loads(summary.read_text())
    assert evaluated["checkpoint"] == str(checkpoint.resolve()) and evaluated["tasks"] == 8


def test_the_readme_quick_start_is_the_tutorial_s_commands() -> None:
    readme = (REPO / "README.md").read_text()
    quick = re.search(r"<!-- quickstart:[^>]*-->\n```console\n(.*?)```", readme, re.DOTALL)
    assert quick
    commands = [line[2:] for line in quick.group(1).splitlines() if line.startswith("$ ")]
    tested = [c for marker, cs in blocks(TUTORIAL.read_text()) if marker.startswith("tested: ") for c in cs]
    assert len(commands) >= 4 and all(c in tested for c in commands), set(commands) - set(tested)
