"""Names that are not UTF-8 (a run named after such a config file) neither fail nor hide the run list.

Python keeps such bytes of a file name as lone surrogates, which JSON cannot
carry: the viewer names those runs and files with the bytes spelled `\\xe9`,
and takes that name back in requests.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import yaml
from logview_records import TASKS, debug_config, debug_run, scripted_plugins
from typer.testing import CliRunner

from astuner.cli import make_app


def get(viewer, path: str, **params) -> httpx.Response:
    return httpx.get(viewer.url.rstrip("/") + path, params=params, timeout=30)


def test_a_run_named_after_a_config_file_that_is_not_utf8_is_listed_and_opened(
    serve, tmp_path: Path, tokenizer_dir: Path
) -> None:
    debug_run(tmp_path, tokenizer_dir, "plain", "calc_agent", TASKS[:1], repeat=1)
    written = debug_config(tmp_path, tokenizer_dir, "odd", "calc_agent", TASKS[:2], repeat=1)
    config = yaml.safe_load(written.read_text(encoding="utf-8"))
    del config["astuner"]["experiment_name"]  # named after the config file, as by default
    conf = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9.yaml"))
    conf.write_text(yaml.safe_dump(config), encoding="utf-8")
    result = CliRunner().invoke(
        make_app(scripted_plugins(tokenizer_dir)), ["run", "--conf", str(conf), "--backbone", "debug"]
    )
    assert result.exit_code == 0, result.output
    (run,) = Path(os.fsdecode(bytes(tmp_path) + b"/launcher_record/caf\xe9")).iterdir()
    rollouts = run / "rollouts"
    shutil.copy(rollouts / "debug.jsonl", Path(os.fsdecode(bytes(rollouts) + b"/copie-\xe9t\xe9.jsonl")))

    viewer = serve(tmp_path / "launcher_record")
    answer = get(viewer, "/api/runs")
    assert answer.status_code == 200, answer.text
    runs = {r["id"].split("/")[0]: r for r in answer.json()["runs"]}
    assert set(runs) == {"plain", "caf\\xe9"}
    odd = runs["caf\\xe9"]
    assert (odd["experiment"], odd["status"]) == ("caf\\xe9", "finished")

    page = get(viewer, "/api/trajectories", run=odd["id"]).json()
    assert page["steps"] == ["copie-\\xe9t\\xe9", "debug"]
    assert [(item["file"], item["task_id"]) for item in page["items"]] == [
        ("copie-\\xe9t\\xe9.jsonl", "add-1"),
        ("copie-\\xe9t\\xe9.jsonl", "add-2"),
        ("debug.jsonl", "add-1"),
        ("debug.jsonl", "add-2"),
    ]
    opened = get(viewer, "/api/trajectory", run=odd["id"], file="copie-\\xe9t\\xe9.jsonl", line=0)
    assert opened.status_code == 200, opened.text
    assert opened.json()["step"] == "copie-\\xe9t\\xe9"
    assert get(viewer, "/api/metrics", run=odd["id"]).status_code == 200
    assert "caf" in get(viewer, "/api/file", run=odd["id"], name="config.yaml").text
