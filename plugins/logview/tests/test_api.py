"""The viewer's JSON API over real debug-run records, through a real server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx
import pytest
from logview_records import SCRIPT, TASKS, hint_trajectory, write_hint_run

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
    assert first["response"]["policy_version"] is None  # the scripted engine has no weights
    assert [m["role"] for m in second["messages"]] == ["tool"]
    assert second["messages"][0]["content"] == "5"
    assert view["tokenizer"]["error"] is None


def test_prefix_breaks_are_marked_where_the_samples_part(serve, tmp_path: Path, calc_run: Path) -> None:
    write_hint_run(tmp_path, calc_run)
    viewer = serve(tmp_path)
    (run,) = get(viewer, "/api/runs").json()["runs"]
    view = get(viewer, "/api/trajectory", run=run["id"], file="step_1.jsonl", line=0).json()
    _, report = merge_trajectory(hint_trajectory())
    (brk,) = report.breaks
    first, second = view["samples"]
    assert (first["calls"], second["calls"]) == ([0, 1], [2])
    shown = {
        "call": 2,
        "sample": 0,
        "previous_call": 1,
        "position": brk.position,
        "reason": "message_removed",
        "message": 4,
        "role": "user",
        "note": brk.describe(),
    }
    assert view["merge"]["breaks"] == [shown] and view["merge"]["drifts"] == 0
    assert "message 4 (user) was removed" in shown["note"]
    assert second["breaks"] == [{"kind": "starts", **shown}]
    assert first["breaks"] == [{"kind": "parted", **shown}]
    # Both samples open the turn after the tool result; the removed hint was a user turn.
    position = brk.position
    assert first["ids"][:position] == second["ids"][:position]
    assert "".join(first["text"][:position]).endswith("</tool_response><|im_end|>\n<|im_start|>")
    assert (first["text"][position], second["text"][position]) == ("user", "assistant")
    assert [turn["call"] for turn in view["turns"]] == [0, 1, 2]


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


def test_metrics_rows_with_nan_as_null_and_the_health_checks_they_cross(serve, record_root: Path) -> None:
    viewer = serve(record_root)
    metrics = get(viewer, "/api/metrics", run=calc_id(viewer)).json()
    rows = metrics["rows"]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[0]["reward/std"] is None
    assert rows[4]["reward/mean"] == pytest.approx(0.5)
    (warning,) = metrics["health"]
    assert warning["check"] == "zero_advantage_groups" and warning["step"] == 3
    assert (warning["steps"], warning["of"]) == (3, 5)
    assert "no learning signal" in warning["text"]


def test_metrics_come_with_their_declarations_resolved(serve, tmp_path: Path, calc_run: Path) -> None:
    """Each key's label, unit, direction and group as declared; a judge's metrics under "judge"."""
    run = tmp_path / "root" / "judged" / "20260101-000000"
    shutil.copytree(calc_run, run)
    rows = [
        {
            "step": s,
            "train/reward_mean": 0.25 * s,
            "val/reward_mean": 0.2 * s,
            "train/judge/one_hop/correct": 0.5,
            "train/tool_parse_failure_rate": 0.1 if s == 2 else 0.0,
            "timing/step_s": 3.0,
            "mine/undeclared": 1.0,
        }
        for s in (1, 2, 3)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    viewer = serve(tmp_path / "root")
    answer = get(viewer, "/api/metrics", run="judged/20260101-000000").json()
    by_key = {m["key"]: m for m in answer["metrics"]}
    assert list(by_key) == [
        "train/reward_mean",
        "val/reward_mean",
        "train/tool_parse_failure_rate",
        "train/judge/one_hop/correct",
        "timing/step_s",
    ]  # in declaration order; the undeclared key left out
    reward = by_key["val/reward_mean"]
    assert (reward["label"], reward["good"], reward["group"], reward["split"]) == (
        "mean judge reward",
        "up",
        "reward",
        "val",
    )
    assert "reward" in reward["description"]
    judge = by_key["train/judge/one_hop/correct"]
    assert (judge["label"], judge["group"]) == ("one_hop/correct", "judge")
    assert by_key["timing/step_s"]["unit"] == "s"
    (warning,) = answer["health"]
    assert (warning["check"], warning["step"], warning["steps"], warning["of"]) == (
        "tool_parse_failure_rate",
        2,
        1,
        3,
    )


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


# ------------------------------------------------------------------ symlinks leading out of the root


def outside_run(folder: Path, calc_run: Path) -> Path:
    """A real run outside the viewer's root: config, rollouts, metrics, and a secret in `.ssh/`."""
    run = folder / "20260101-000000"
    shutil.copytree(calc_run, run)
    config = (run / "config.yaml").read_text(encoding="utf-8")
    (run / "config.yaml").write_text(config.replace("experiment_name: calc", "experiment_name: SECRET-exp"))
    (run / ".ssh").mkdir()
    (run / ".ssh" / "id_rsa").write_text("SECRET-KEY\n", encoding="utf-8")
    (run / "metrics.jsonl").write_text('{"step": 1, "SECRET/metric": 1.0}\n', encoding="utf-8")
    return run


def assert_not_served(viewer, run: str, names: list[str]) -> None:
    """Every route answers 404 for `run`, the same whether or not a name exists, and shows nothing of it."""
    answers = [
        get(viewer, "/api/trajectories", run=run),
        get(viewer, "/api/trajectory", run=run, file="debug.jsonl", line=0),
        get(viewer, "/api/metrics", run=run),
        *(get(viewer, "/api/file", run=run, name=name) for name in names),
    ]
    for response in answers:
        assert response.status_code == 404, (run, response.request.url, response.text)
        assert "SECRET" not in response.text
    missing = get(viewer, "/api/file", run=run, name="no-such-file")
    for name, response in zip(names, answers[3:], strict=True):
        assert response.text.replace(name, "no-such-file") == missing.text, "a 404 must not tell what exists"


def test_a_symlinked_run_folder_leading_out_of_the_root_is_not_served(
    serve, tmp_path: Path, calc_run: Path
) -> None:
    root = tmp_path / "root"
    shutil.copytree(calc_run, root / "calc" / calc_run.name)
    secret_run = outside_run(tmp_path / "outside", calc_run)
    os.symlink(secret_run, root / "calc" / "linked-run")  # a run folder that is a link out
    os.symlink(tmp_path / "outside", root / "linked-experiment")  # an experiment folder that is a link out
    os.symlink(Path.home(), root / "calc" / "home")  # whatever lies there, nothing of it is served
    viewer = serve(root)
    runs = get(viewer, "/api/runs")
    assert [r["id"] for r in runs.json()["runs"]] == [f"calc/{calc_run.name}"]
    assert "SECRET" not in runs.text
    names = [".ssh/id_rsa", "config.yaml", "metrics.jsonl", "rollouts/debug.jsonl"]
    for run in ["calc/linked-run", f"linked-experiment/{secret_run.name}", "calc/home"]:
        assert_not_served(viewer, run, names)
    assert get(viewer, "/api/file", run="calc/home", name=".bashrc").status_code == 404
    # The real run is untouched.
    assert get(viewer, "/api/trajectories", run=f"calc/{calc_run.name}").json()["total"] == 2 * len(TASKS)


def test_symlinked_files_inside_a_run_leading_out_of_the_root_are_not_served(
    serve, tmp_path: Path, calc_run: Path
) -> None:
    root = tmp_path / "root"
    run = root / "calc" / calc_run.name
    shutil.copytree(calc_run, run)
    secret_run = outside_run(tmp_path / "outside", calc_run)
    shutil.copy(secret_run / "rollouts" / "debug.jsonl", secret_run / "rollouts" / "step_7.jsonl")
    os.symlink(secret_run / ".ssh" / "id_rsa", run / "notes.txt")
    os.symlink(secret_run / ".ssh", run / "ssh")  # a folder inside the run that is a link out
    os.symlink(secret_run / "rollouts" / "step_7.jsonl", run / "rollouts" / "step_7.jsonl")
    (run / "metrics.jsonl").unlink()
    os.symlink(secret_run / "metrics.jsonl", run / "metrics.jsonl")
    (run / "config.yaml").unlink()
    os.symlink(secret_run / "config.yaml", run / "config.yaml")
    # A run whose whole rollouts folder is a link out.
    other = root / "other" / "20260103-000000"
    other.mkdir(parents=True)
    os.symlink(secret_run / "rollouts", other / "rollouts")
    viewer = serve(root)

    runs = get(viewer, "/api/runs")
    assert "SECRET" not in runs.text
    by_id = {r["id"]: r for r in runs.json()["runs"]}
    shown = by_id[f"calc/{calc_run.name}"]
    assert shown["experiment"] == "calc" and shown["steps"] == 0 and shown["last_metrics"] == {}
    page = get(viewer, "/api/trajectories", run=shown["id"], limit=500).json()
    assert page["steps"] == ["debug"] and page["total"] == 2 * len(TASKS)
    assert {item["file"] for item in page["items"]} == {"debug.jsonl"}
    assert get(viewer, "/api/trajectory", run=shown["id"], file="step_7.jsonl", line=0).status_code == 404
    assert get(viewer, "/api/metrics", run=shown["id"]).json() == {"rows": [], "metrics": [], "health": []}
    for name in ["notes.txt", "ssh/id_rsa", "config.yaml", "metrics.jsonl", "rollouts/step_7.jsonl"]:
        response = get(viewer, "/api/file", run=shown["id"], name=name)
        assert response.status_code == 404 and "SECRET" not in response.text, name
        missing = get(viewer, "/api/file", run=shown["id"], name="no-such-file")
        assert response.text.replace(name, "no-such-file") == missing.text
    if "other/20260103-000000" in by_id:
        other_page = get(viewer, "/api/trajectories", run="other/20260103-000000").json()
        assert other_page["total"] == 0 and other_page["steps"] == []
    assert "SECRET" not in get(viewer, "/api/trajectory", run=shown["id"], file="debug.jsonl", line=0).text


def test_symlinks_that_stay_inside_the_root_are_followed(serve, tmp_path: Path, calc_run: Path) -> None:
    root = tmp_path / "root"
    run = root / "calc" / calc_run.name
    shutil.copytree(calc_run, run)
    os.symlink(run, root / "calc" / "latest")
    os.symlink(run / "astuner.log", run / "log.txt")
    viewer = serve(tmp_path / "root")
    assert sorted(r["id"] for r in get(viewer, "/api/runs").json()["runs"]) == [
        "calc/" + calc_run.name,
        "calc/latest",
    ]
    assert get(viewer, "/api/trajectories", run="calc/latest").json()["total"] == 2 * len(TASKS)
    assert get(viewer, "/api/trajectory", run="calc/latest", file="debug.jsonl", line=0).status_code == 200
    log = get(viewer, "/api/file", run=f"calc/{calc_run.name}", name="log.txt")
    assert log.status_code == 200 and log.text == (run / "astuner.log").read_text(encoding="utf-8")


# ------------------------------------------------------------------ lines that are JSON but not trajectories


def test_schema_invalid_lines_are_skipped_and_counted(serve, tmp_path: Path, calc_run: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(calc_run, run)
    rollouts = run / "rollouts" / "debug.jsonl"
    first = read_trajectories(rollouts)[0]
    bad_tail = first.model_copy(update={"trajectory_id": "bad-tail"}).model_dump_json()
    bad_tail = bad_tail.replace('"is_success":true', '"is_success":"very"')
    bad_calls = first.model_copy(update={"trajectory_id": "bad-calls"}).model_dump_json()
    bad_calls = bad_calls.replace('"calls":[{"index":0,', '"calls":[{"index":0,"bogus":1,', 1)
    assert '"bogus":1' in bad_calls and '"is_success":"very"' in bad_tail
    with rollouts.open("a", encoding="utf-8") as out:
        for line in [
            '{"task_id": 1}',  # the example from the bug report
            '{"trajectory_id": "bad-reward", "reward": "lots"}',
            '{"trajectory_id": "extra", "unknown_field": 1}',
            bad_tail,
            '{"trajectory_id": "bad-madness", "madness": "not a list"}',
            "[1, 2]",
            "not json",
            bad_calls,  # same group as the first trajectory; its calls are only read when opened
        ]:
            out.write(line + "\n")
    viewer = serve(run)
    page = get(viewer, "/api/trajectories", run=".", limit=500).json()
    assert page["bad_lines"] == 7
    listed = [(item["line"], item["trajectory_id"]) for item in page["items"]]
    assert listed[:10] == [
        (i, t.trajectory_id) for i, t in enumerate(read_trajectories(calc_run / "rollouts" / "debug.jsonl"))
    ]
    for line in range(10, 17):
        response = get(viewer, "/api/trajectory", run=".", file="debug.jsonl", line=line)
        assert response.status_code == 404, (line, response.text)
        assert "not a valid trajectory" in response.json()["detail"]
    # Opening the first trajectory reads its group, which finds the member whose calls do not parse.
    view = get(viewer, "/api/trajectory", run=".", file="debug.jsonl", line=0)
    assert view.status_code == 200, view.text
    assert view.json()["advantage"]["group_size"] == 2
    response = get(viewer, "/api/trajectory", run=".", file="debug.jsonl", line=17)
    assert response.status_code == 404
    assert "not a valid trajectory" in response.json()["detail"]
    for item in page["items"][:10]:
        assert (
            get(viewer, "/api/trajectory", run=".", file="debug.jsonl", line=item["line"]).status_code == 200
        )
    after = get(viewer, "/api/trajectories", run=".", limit=500).json()
    assert after["total"] == after["trajectories"] == 2 * len(TASKS)
    assert after["bad_lines"] == 8
    assert [item["trajectory_id"] for item in after["items"]] == [t for _, t in listed[:10]]


def test_a_bad_line_opened_first_is_skipped_too(serve, tmp_path: Path, calc_run: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(calc_run, run)
    first = read_trajectories(run / "rollouts" / "debug.jsonl")[0]
    bad = first.model_copy(update={"trajectory_id": "bad", "group_id": "alone"}).model_dump_json()
    bad = bad.replace('"prompt_ids":[', '"prompt_ids":["x",', 1)
    (run / "rollouts" / "step_1.jsonl").write_text(bad + "\n", encoding="utf-8")
    viewer = serve(run)
    before = get(viewer, "/api/trajectories", run=".", step="1").json()
    assert before["total"] == 1 and before["bad_lines"] == 0  # calls are not parsed to list a line
    response = get(viewer, "/api/trajectory", run=".", file="step_1.jsonl", line=0)
    assert response.status_code == 404 and "not a valid trajectory" in response.json()["detail"]
    after = get(viewer, "/api/trajectories", run=".", step="1").json()
    assert after["total"] == 0 and after["bad_lines"] == 1
