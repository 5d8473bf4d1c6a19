"""`astuner sft --from FILE` on input it cannot train as written: one readable error naming file and line;
a large file is read a line at a time and says how far it got."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")

import astuner_backbone_torch.plugin as torch_plugin
import astuner_backbone_torch.sft as sft_module
from typer.testing import CliRunner

from astuner.cli import make_app


def line(question: str = "What is 2 + 2?", **extra: object) -> str:
    messages = [{"role": "user", "content": question}, {"role": "assistant", "content": "4."}]
    return json.dumps({"messages": messages, **extra})


@pytest.fixture
def sft(plugins, workdir: Path, tiny_model_dir: Path):
    """`astuner sft --from <file holding these lines>` with the tiny model: (exit code, output, run log)."""
    plugins.add(torch_plugin, name="backbone_torch")
    app = make_app(plugins)
    conf = workdir / "warm.yaml"
    block = {
        "experiment_name": "warm",
        "model": {"path": str(tiny_model_dir)},
        "torch": {"train_dtype": "float32", "num_threads": 1, "sft": {"epochs": 1, "batch_size": 4}},
    }
    conf.write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")

    def run(lines: list[bytes]) -> tuple[int, str, str]:
        demos = workdir / "demos.jsonl"
        demos.write_bytes(b"\n".join(lines) + b"\n")
        result = CliRunner().invoke(app, ["sft", "--conf", str(conf), "--from", str(demos)])
        logs = sorted((workdir / "launcher_record" / "warm-sft").glob("*/astuner.log"))
        return result.exit_code, result.output, logs[-1].read_text() if logs else ""

    return run


def refused(run: tuple[int, str, str], *says: str) -> None:
    code, output, _ = run
    assert code == 1, output
    assert "Traceback" not in output
    flat = " ".join(output.split())  # the terminal wraps long lines
    for said in says:
        assert said in flat, output


def test_a_role_a_chat_template_does_not_know_is_refused_by_file_and_line(sft) -> None:
    narrated = json.loads(line())
    narrated["messages"].insert(1, {"role": "narrator", "content": "Meanwhile..."})
    refused(
        sft([line().encode(), json.dumps(narrated).encode()]),
        "demos.jsonl', line 2: message 1 has role 'narrator'",
        "one of system, user, assistant, tool",
    )


def test_a_file_that_is_not_utf8_is_refused_by_file_and_line(sft) -> None:
    latin1 = line("Qu'est-ce que 2 + 2 ? Réponds.").replace("\\u00e9", "\u00e9").encode("latin-1")
    assert b"\xe9" in latin1
    refused(sft([line().encode(), line().encode(), latin1]), "demos.jsonl, line 3: not UTF-8 text (byte 0xe9")
    refused(sft([latin1]), "demos.jsonl, line 1: not UTF-8 text (byte 0xe9")  # the line that tells the kind


def test_a_line_past_the_bound_is_refused_by_file_line_and_limit(sft) -> None:
    long = line(notes="x" * (8 * 2**20)).encode()
    refused(sft([line().encode(), long]), "demos.jsonl, line 2: longer than 8,388,608 bytes")


def test_reading_a_file_says_how_far_it_got(sft, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sft_module, "PROGRESS_EVERY_S", 0.0)  # a line per demonstration
    code, output, log = sft([line(f"What is {i} + 2?").encode() for i in range(6)])
    assert code == 0, output
    said = [json.loads(row)["event"] for row in log.splitlines() if "demonstrations read" in row]
    assert [s.split(" demonstrations read")[0] for s in said] == [f"sft: {i}" for i in range(1, 7)]
    assert said[-1].endswith("100% of demos.jsonl (line 6)")
    assert "sft: reading demonstrations from" in log
