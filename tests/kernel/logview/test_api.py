"""The viewer's JSON API over real debug-run records, through a real server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx
import pytest
from logview_records import SCRIPT, TASKS

from astuner.core.merge import merge_trajectory
from astuner.record import read_trajectories
from astuner.testing.engines import LOGPROB


def get(viewer, path: str, **params) -> httpx.Response:
    return httpx.get(viewer.url.rstrip("/") + path, params=params, timeout=30)


def calc_id(viewer) -> str:
    (run,) = [r for r in get(viewer, "/api/runs").json()["runs"] if r["experiment"] == "calc"]
    return run["id"]


def test_run_list_from_a_root_an_experiment_and_a_run(serve, record_root: Path, calc_run: Path) -> None:
    runs = get(serve(record_root), "/api/runs").json()["runs"]
    by_name = {r["experiment"]: r for r in runs}
    assert set(by_name) == {"calc", "long"}
    calc = by_name["calc"]
    assert calc["id"] == f"calc/{calc_run.name}"
    assert calc["backbone"] == "debug"
    assert calc["steps"] == 5  # from metrics.jsonl
    assert calc["mean_reward"] == pytest.approx(0.5)  # the last step's reward/mean
    assert by_name["long"]["mean_reward"] == 1.0  # no metrics: the mean over its rollouts
    assert calc["time"][:4] == calc_run.name[:4]

    (only,) = get(serve(record_root / "calc"), "/api/runs").json()["runs"]
    assert only["id"] == calc_run.name
    (itself,) = get(serve(calc_run), "/api/runs").json()["runs"]
    assert itself["id"] == "."
    assert get(serve(calc_run), "/api/trajectories", run=".").json()["total"] == 2 * len(TASKS)


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({}, ["add-1"] * 2 + ["add-2"] * 2 + ["echo"] * 2 + ["sing"] * 2 + ["explode"] * 2),
        ({"task": "ADD"}, ["add-1", "add-1", "add-2", "add-2"]),
        ({"success": "yes"}, ["add-1", "add-2"]),
        ({"min_reward": 0.5}, ["add-1", "add-2"]),
        ({"max_reward": -0.5}, ["sing", "sing"]),
        ({"min_reward": -0.5, "max_reward": 0.5}, ["add-1", "add-2", "echo", "echo"]),
        ({"madness": "yes"}, ["sing", "sing"]),
        ({"error": "yes"}, ["explode", "explode"]),
        ({"error": "no", "success": "no", "madness": "no"}, ["add-1", "add-2", "echo", "echo"]),
        ({"agent": "default", "task": "e"}, ["echo", "echo"]),
        ({"agent": "nobody"}, []),
        ({"step": "debug", "task": "sing"}, ["sing", "sing"]),
        ({"step": "3"}, []),
    ],
)
def test_filters(serve, record_root: Path, filters: dict, expected: list[str]) -> None:
    viewer = serve(record_root)
    page = get(viewer, "/api/trajectories", run=calc_id(viewer), **filters).json()
    assert sorted(item["task_id"] for item in page["items"]) == sorted(expected)
    assert page["total"] == len(expected)
    assert page["trajectories"] == 2 * len(TASKS)
    assert page["steps"] == ["debug"]
    assert page["agents"] == ["default"]


def test_flags_and_paging_limits_are_checked(serve, record_root: Path) -> None:
    viewer = serve(record_root)
    run = calc_id(viewer)
    assert get(viewer, "/api/trajectories", run=run, success="maybe").status_code == 400
    assert get(viewer, "/api/trajectories", run=run, limit=501).status_code == 422
    assert get(viewer, "/api/trajectories", run=run, offset=-1).status_code == 422


def write_training_run(root: Path, source: Path, steps: int, copies: int) -> Path:
    """A run laid out as training backbones write it: `rollouts/step_<n>.jsonl`, from real trajectories."""
    run = root / "train" / "20260102-030405"
    (run / "rollouts").mkdir(parents=True)
    shutil.copy(source / "config.yaml", run / "config.yaml")
    trajectories = read_trajectories(source / "rollouts" / "debug.jsonl")
    for step in range(1, steps + 1):
        with (run / "rollouts" / f"step_{step}.jsonl").open("w", encoding="utf-8") as out:
            for k in range(copies):
                t = trajectories[k % len(trajectories)].model_copy(deep=True)
                t.trajectory_id = f"s{step}-t{k}"
                out.write(t.model_dump_json() + "\n")
    return run


def test_pages_run_across_step_files_in_order(serve, tmp_path: Path, calc_run: Path) -> None:
    write_training_run(tmp_path, calc_run, steps=3, copies=37)
    viewer = serve(tmp_path)
    (run,) = get(viewer, "/api/runs").json()["runs"]
    assert run["steps"] == 3
    seen = []
    offset = 0
    while True:
        page = get(viewer, "/api/trajectories", run=run["id"], offset=offset, limit=25).json()
        assert page["total"] == 3 * 37
        seen += [(item["step"], item["line"], item["trajectory_id"]) for item in page["items"]]
        offset += 25
        if offset >= page["total"]:
            break
    assert seen == [(str(s), k, f"s{s}-t{k}") for s in range(1, 4) for k in range(37)]
    step2 = get(viewer, "/api/trajectories", run=run["id"], step="2", limit=500).json()
    assert step2["total"] == 37
    assert {item["file"] for item in step2["items"]} == {"step_2.jsonl"}
    assert step2["steps"] == ["1", "2", "3"]


def test_trajectory_view_has_the_training_tokens(serve, record_root: Path, calc_run: Path) -> None:
    viewer = serve(record_root)
    view = get(viewer, "/api/trajectory", run=calc_id(viewer), file="debug.jsonl", line=0).json()
    trajectory = read_trajectories(calc_run / "rollouts" / "debug.jsonl")[0]
    (sample,), _ = merge_trajectory(trajectory)
    (shown,) = view["samples"]
    assert shown["ids"] == sample.input_ids
    assert shown["mask"] == sample.loss_mask
    assert shown["spans"] == [list(s) for s in sample.response_spans]
    assert shown["logprobs"] == [LOGPROB if m else None for m in sample.loss_mask]
    assert "".join(shown["text"]).startswith("<|im_start|>system\nYou are a careful calculator agent.")
    trained_text = "".join(t for t, m in zip(shown["text"], shown["mask"], strict=True) if m)
    assert trained_text == (
        'Let me calculate.\n<tool_call>\n{"name": "calculate", "arguments": {"expression": "2 + 3"}}\n'
        "</tool_call><|im_end|>The answer is 5.<|im_end|>"
    )
    assert view["reward"] == 1.0 and view["is_success"] is True
    # GRPO over the group {1.0, 0.0}: (1 - 0.5) / (std 0.707 + eps) for both steps.
    assert view["advantage"]["steps"] == pytest.approx([0.7071, 0.7071], abs=1e-3)
    trained_advantages = [a for a, m in zip(shown["advantages"], shown["mask"], strict=True) if m]
    assert trained_advantages == pytest.approx([0.7071] * sum(shown["mask"]), abs=1e-3)
    assert {a for a, m in zip(shown["advantages"], shown["mask"], strict=True) if not m} == {0.0}
    first, second = view["turns"]
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert first["response"]["tool_calls"][0]["name"] == "calculate"
    assert [m["role"] for m in second["messages"]] == ["tool"]
    assert second["messages"][0]["content"] == "5"
    assert view["tokenizer"]["error"] is None


def test_error_trajectory_shows_its_traceback_and_no_samples(serve, record_root: Path) -> None:
    viewer = serve(record_root)
    run = calc_id(viewer)
    (item, _) = get(viewer, "/api/trajectories", run=run, error="yes").json()["items"]
    view = get(viewer, "/api/trajectory", run=run, file=item["file"], line=item["line"]).json()
    assert "Traceback (most recent call last)" in view["error"]
    assert "RuntimeError: the calculator exploded <b>boom</b>" in view["error"]
    assert view["samples"] == []
    assert item["error"] == "RuntimeError: the calculator exploded <b>boom</b>"


def test_without_a_tokenizer_tokens_are_ids(serve, record_root: Path, tmp_path: Path) -> None:
    viewer = serve(record_root, tokenizer=str(tmp_path / "no-such-tokenizer"))
    view = get(viewer, "/api/trajectory", run=calc_id(viewer), file="debug.jsonl", line=0).json()
    assert view["tokenizer"]["error"]
    assert view["samples"][0]["text"] is None
    assert view["samples"][0]["ids"]


def test_an_uncached_hub_name_fails_fast_without_the_network(serve, record_root: Path) -> None:
    viewer = serve(record_root, tokenizer="nobody-astuner-test/not-a-model")
    view = get(viewer, "/api/trajectory", run=calc_id(viewer), file="debug.jsonl", line=0).json()
    assert "neither a folder nor a model in the local HuggingFace cache" in view["tokenizer"]["error"]
    assert "--tokenizer" in view["tokenizer"]["error"]
    assert view["samples"][0]["text"] is None


def test_metrics_rows_with_nan_as_null(serve, record_root: Path) -> None:
    viewer = serve(record_root)
    rows = get(viewer, "/api/metrics", run=calc_id(viewer)).json()["rows"]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[0]["reward/std"] is None
    assert rows[4]["reward/mean"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/api/trajectories", {"run": ".."}),
        ("/api/trajectories", {"run": "../.."}),
        ("/api/trajectories", {"run": "/etc"}),
        ("/api/trajectories", {"run": "calc/../../.."}),
        ("/api/trajectory", {"file": "../config.yaml", "line": 0}),
        ("/api/trajectory", {"file": "../../long/x/rollouts/debug.jsonl", "line": 0}),
        ("/api/trajectory", {"file": "debug.jsonl", "line": 999}),
        ("/api/file", {"name": "../../calc"}),
        ("/api/file", {"name": "/etc/passwd"}),
        ("/api/file", {"name": "../../../../../../etc/passwd"}),
        ("/api/file", {"name": "rollouts"}),
        ("/api/file", {"name": "outside-link"}),
        ("/api/metrics", {"run": "../calc"}),
        ("/static/..%2F..%2F__init__.py", {}),
        ("/static/../app.py", {}),
        ("/static/%2e%2e/store.py", {}),
        ("/..%2F..%2Fetc%2Fpasswd", {}),
    ],
)
def test_path_traversal_gets_404(serve, tmp_path: Path, calc_run: Path, path: str, params: dict) -> None:
    run = tmp_path / "root" / "calc" / calc_run.name
    shutil.copytree(calc_run, run)
    (tmp_path / "secret.txt").write_text("secret", encoding="utf-8")
    os.symlink(tmp_path / "secret.txt", run / "outside-link")
    viewer = serve(tmp_path / "root")
    params = {"run": f"calc/{calc_run.name}", **params} if path != "/api/trajectories" else params
    response = httpx.get(viewer.url.rstrip("/") + path, params=params, timeout=30)
    assert response.status_code == 404, response.text
    assert "secret" not in response.text


def test_run_files_are_served_as_plain_text(serve, tmp_path: Path, calc_run: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(calc_run, run)
    with (run / "astuner.log").open("a", encoding="utf-8") as log:
        log.write(json.dumps({"event": SCRIPT}) + "\n")
    viewer = serve(run)
    response = get(viewer, "/api/file", run=".", name="astuner.log")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert response.headers["x-content-type-options"] == "nosniff"
    assert SCRIPT in response.text
    assert "backbone: debug" in get(viewer, "/api/file", run=".", name="config.yaml").text


def test_model_text_is_data_never_markup(serve, record_root: Path) -> None:
    viewer = serve(record_root)
    run = calc_id(viewer)
    page = get(viewer, "/api/trajectories", run=run, task="echo").json()
    item = page["items"][0]
    response = get(viewer, "/api/trajectory", run=run, file=item["file"], line=item["line"])
    assert response.headers["content-type"] == "application/json"
    view = response.json()
    assert view["turns"][0]["response"]["content"] == f"You said: {SCRIPT}"
    assert SCRIPT in "".join(view["samples"][0]["text"])
    index = get(viewer, "/")
    assert index.headers["content-type"].startswith("text/html")
    csp = index.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "unsafe-inline" not in csp
    # The page is static: no record data is ever templated into HTML.
    assert "<script>window" not in index.text


def test_static_assets_are_served_from_the_package(serve, record_root: Path) -> None:
    viewer = serve(record_root)
    for name, kind in (("app.js", "javascript"), ("app.css", "text/css")):
        response = get(viewer, f"/static/{name}")
        assert response.status_code == 200
        assert kind in response.headers["content-type"]
    html = get(viewer, "/").text
    assert "http://" not in html and "https://" not in html  # nothing loaded from elsewhere
