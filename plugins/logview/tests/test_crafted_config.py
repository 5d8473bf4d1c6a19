"""A records folder is other people's files: a crafted `config.yaml` in a run folder (an alias bomb
under a key the run list reads) must neither hang the viewer nor hide the other runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
from logview_records import TASKS, debug_run

# Nine levels of nine aliases: a few hundred bytes that stand for 9**9 strings, all under model.path.
BOMB = "\n".join(
    [
        "astuner:",
        "  experiment_name: bomb",
        "  l0: &l0 ['lol', 'lol', 'lol', 'lol', 'lol', 'lol', 'lol', 'lol', 'lol']",
    ]
    + [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    + ["  model:", "    path: *l8", ""]
)


def test_a_run_whose_config_is_an_alias_bomb_is_listed_without_its_config(
    serve, tmp_path: Path, tokenizer_dir: Path
) -> None:
    plain = debug_run(tmp_path, tokenizer_dir, "plain", "calc_agent", TASKS[:1], repeat=1)
    crafted = tmp_path / "launcher_record" / "crafted" / plain.name
    shutil.copytree(plain, crafted)
    (crafted / "config.yaml").write_text(BOMB, encoding="utf-8")

    viewer = serve(tmp_path / "launcher_record")
    answer = httpx.get(viewer.url.rstrip("/") + "/api/runs", timeout=30)
    assert answer.status_code == 200, answer.text
    runs = {r["id"].split("/")[0]: r for r in answer.json()["runs"]}
    assert set(runs) == {"plain", "crafted"}
    assert (runs["crafted"]["model"], runs["crafted"]["experiment"]) == ("", "crafted")
    assert runs["plain"]["model"] == str(tokenizer_dir)

    opened = httpx.get(
        viewer.url.rstrip("/") + "/api/trajectory",
        params={"run": runs["crafted"]["id"], "file": "debug.jsonl", "line": 0},
        timeout=30,
    )
    assert opened.status_code == 200, opened.text
    assert opened.json()["tokenizer"]["error"] == "no model.path in config.yaml"
