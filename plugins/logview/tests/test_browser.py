"""The viewer page in headless Chromium (Debian's `chromium`), driven by Playwright.

Runs -> trajectories -> token view on records written by a real debug run:
hover a token and read its log-prob, check the colours of trained and
untrained tokens, filters, escaping of model text, metrics charts, a
20k-token trajectory, prefix-break markers, the list and the view per agent. Screenshots are kept
in `test-artifacts/`.
"""

from __future__ import annotations

import colorsys
import json
import re
import shutil
from pathlib import Path

import httpx
import pytest
from logview_records import LONG_TURNS, SCRIPT, write_hint_run, write_werewolf_metrics, write_werewolf_run

sync_api = pytest.importorskip("playwright.sync_api", reason="browser tests need `pip install playwright`")
expect = sync_api.expect

ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts"
BLUE, ORANGE = "#09ABCF", "#D98510"


def expected_colour(hex_colour: str, logprob: float | None) -> tuple[int, int, int]:
    """The origin's shading: saturation x (1/3 .. 1) as the log-prob goes from -7 to 0."""
    clipped = 0.0 if logprob is None else max(-7.0, min(0.0, logprob))
    factor = 1 / 3 + 2 / 3 * (1 - clipped / -7)
    r, g, b = (int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5))
    h, lightness, s = colorsys.rgb_to_hls(r, g, b)
    return tuple(round(v * 255) for v in colorsys.hls_to_rgb(h, lightness, s * factor))


def background(locator) -> tuple[int, int, int]:
    css = locator.evaluate("e => getComputedStyle(e).backgroundColor")
    return tuple(int(v) for v in re.findall(r"\d+", css)[:3])


def close_to(actual: tuple[int, ...], wanted: tuple[int, ...]) -> bool:
    return all(abs(a - w) <= 1 for a, w in zip(actual, wanted, strict=True))


def open_run(page, url: str, experiment: str) -> None:
    page.goto(url)
    page.locator(".run-row", has_text=experiment).click()
    page.wait_for_selector(".trajectory-row")


def test_run_trajectory_token_view(page, serve, record_root: Path) -> None:
    viewer = serve(record_root)
    open_run(page, viewer.url, "calc")
    assert page.locator(".trajectory-row").count() == 10
    page.locator(".trajectory-row", has_text="add-1").first.click()
    page.wait_for_selector(".tok.trained")

    summary = page.locator(".summary")
    assert summary.locator(".reward").inner_text() == "1"
    assert summary.locator(".advantage").inner_text().startswith("[0.7071, 0.7071] (grpo, group of 2")
    assert page.locator(".tool-call .tool-name").first.inner_text() == "→ calculate"
    assert page.locator(".message.role-tool pre").first.inner_text() == "5"

    api = httpx.get(
        viewer.url + "api/trajectory",
        params={"run": page.evaluate("state.run"), "file": "debug.jsonl", "line": 0},
        timeout=30,
    ).json()
    (sample,) = api["samples"]
    first_trained = sample["mask"].index(1)

    trained = page.locator(".tok.trained").first
    trained.scroll_into_view_if_needed()
    trained.hover()
    tip = page.locator("#tooltip")
    assert tip.is_visible()
    text = tip.inner_text()
    assert f"token {first_trained} · id {sample['ids'][first_trained]}" in text
    assert "logprob -0.2500" in text
    assert "loss mask 1" in text
    assert background(trained) == expected_colour(BLUE, -0.25)
    assert trained.inner_text() == sample["text"][first_trained]

    untrained = page.locator(".tok.untrained").first
    untrained.hover()
    assert "logprob N/A" in tip.inner_text() and "loss mask 0" in tip.inner_text()
    assert close_to(background(untrained), (0xD9, 0x85, 0x10))
    assert background(trained) != background(untrained)

    boundaries = page.locator(".boundary").all_inner_texts()
    assert boundaries == ["call 0", "▸ reply", "call 1", "▸ reply"]
    assert page.locator(".tok").count() == len(sample["ids"])

    page.locator(".token-view").scroll_into_view_if_needed()
    trained.hover()
    page.screenshot(path=str(ARTIFACTS / "logview-token-view.png"))


def test_model_text_shows_as_text(page, serve, record_root: Path) -> None:
    open_run(page, serve(record_root).url, "calc")
    page.locator(".trajectory-row", has_text="echo").first.click()
    page.wait_for_selector(".tok.trained")
    assert page.locator(".generated pre.content").first.inner_text() == f"You said: {SCRIPT}"
    assert SCRIPT in page.locator(".tokens").first.inner_text()
    assert page.evaluate("window.__pwned") is None
    sources = page.eval_on_selector_all("script", "scripts => scripts.map(s => s.getAttribute('src'))")
    assert sources == ["/static/trajectory.js", "/static/metrics.js", "/static/app.js"]  # no inline script


def test_filters_error_and_madness(page, serve, record_root: Path) -> None:
    open_run(page, serve(record_root).url, "calc")
    page.select_option("select[name=error]", "yes")
    expect(page.locator(".trajectory-row")).to_have_count(2)
    assert set(page.locator(".trajectory-row td:nth-child(2)").all_inner_texts()) == {"explode"}
    page.locator(".trajectory-row").first.click()
    traceback = page.locator(".traceback")
    traceback.wait_for()
    assert "RuntimeError: the calculator exploded <b>boom</b>" in traceback.inner_text()
    assert page.locator("#detail b").count() == 0
    assert "the workflow raised" in page.locator(".token-view").inner_text()

    page.select_option("select[name=error]", "")
    page.select_option("select[name=madness]", "yes")
    expect(page.locator(".trajectory-row td:nth-child(2)")).to_have_text(["sing", "sing"])
    assert page.locator(".trajectory-row .flag.madness").count() == 2

    page.select_option("select[name=madness]", "")
    page.fill("input[name=task]", "add")
    expect(page.locator(".trajectory-row")).to_have_count(4)
    page.fill("input[name=min_reward]", "0.5")
    expect(page.locator(".trajectory-row")).to_have_count(2)


def test_metrics_charts(page, serve, record_root: Path) -> None:
    open_run(page, serve(record_root).url, "calc")
    page.click("#tabs button[data-tab=metrics]")
    page.wait_for_selector(".chart")
    keys = page.eval_on_selector_all(".chart", "charts => charts.map(c => c.dataset.key)")
    # the declared metric in its group first, then the keys nothing declares, as they come
    assert keys == ["train/zero_adv_group_frac", "reward/mean", "success/rate", "tokens/mean", "time/s"]
    assert page.locator(".chart polyline").count() == 5
    health = page.locator(".health").inner_text()
    assert "zero_advantage_groups, on 3 of 5 steps; first at step 3: 100% of the task groups" in health
    page.click("#tabs button[data-tab=config]")
    page.wait_for_selector("pre.file")
    assert "backbone: debug" in page.locator("pre.file").inner_text()


def test_metrics_charts_are_grouped_by_their_declarations(
    page, serve, tmp_path: Path, calc_run: Path
) -> None:
    run = tmp_path / "root" / "judged" / "20260101-000000"
    shutil.copytree(calc_run, run)
    rows = [
        {
            "step": s,
            "train/reward_mean": 0.25 * s,
            "val/reward_mean": 0.2 * s,
            "train/judge/one_hop/correct": 0.5 * s,
            "train/judge/two_hop/correct": 0.25,
            "timing/step_s": 3.0,
            "mine/undeclared": 1.0,
        }
        for s in (1, 2)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    open_run(page, serve(tmp_path / "root").url, "calc")  # the run's config names experiment calc
    page.click("#tabs button[data-tab=metrics]")
    page.wait_for_selector(".chart")
    titles = page.locator(".chart-group h4").all_inner_texts()
    assert titles == ["reward", "judge metrics", "timing", "other"]
    judge = page.locator(".chart-group[data-group=judge] .chart figcaption span:first-child")
    assert judge.all_inner_texts() == ["one_hop/correct (last 1)", "two_hop/correct (last 0.2500)"]
    val = page.locator(".chart[data-key='val/reward_mean'] figcaption")
    assert val.inner_text().splitlines()[0] == "validation: mean judge reward (last 0.4000)"
    assert "(higher is better)" in val.get_attribute("title")
    assert "step time (last 3 s)" in page.locator(".chart[data-key='timing/step_s']").inner_text()


def test_each_agent_has_a_chart_section_with_its_judge_metrics(
    page, serve, tmp_path: Path, calc_run: Path
) -> None:
    write_werewolf_metrics(write_werewolf_run(tmp_path, calc_run))
    page.set_viewport_size({"width": 1280, "height": 1000})
    page.goto(serve(tmp_path).url)
    page.wait_for_selector(".trajectory-row")
    page.click("#tabs button[data-tab=metrics]")
    page.wait_for_selector(".chart")
    titles = page.locator(".chart-group h4").all_inner_texts()
    assert [t for t in titles if t.startswith("agent")] == ["agent: seer", "agent: villager", "agent: wolf"]
    wolf = page.locator(".chart-group[data-group='agent: wolf'] .chart")
    # Each metric's splits side by side, the judge's numbers of the wolf too (one declaration names them).
    names = (
        "reward_mean",
        "win_rate",
        "calls_mean",
        "response_tokens_mean",
        "judge/choices",
        "judge/fallback_share",
    )
    assert wolf.evaluate_all("charts => charts.map(c => c.dataset.key)") == [
        f"{split}/agent/wolf/{name}" for name in names for split in ("train", "val")
    ]
    share = wolf.nth(-2).locator("figcaption span").first
    assert share.inner_text() == "wolf: fallback_share (last 0.2222)"
    assert page.locator(".chart-group[data-group=judge] .chart").count() == 2  # village_won, train and val
    # The seer's two calls a game, the same every step: a flat line mid-height between two ticks.
    calls = page.locator(".chart[data-key='train/agent/seer/calls_mean'] svg")
    assert calls.locator(".tick").all_text_contents()[:2] == ["2.200", "1.800"]
    points = calls.locator("polyline").get_attribute("points").split()
    assert [float(point.split(",")[1]) for point in points] == pytest.approx([70, 70, 70])  # of 140
    page.locator(".chart-group[data-group='agent: seer']").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "logview-per-agent-charts.png"))


def test_a_link_opens_the_trajectory(page, serve, record_root: Path, calc_run: Path) -> None:
    viewer = serve(record_root)
    page.goto(f"{viewer.url}#run=calc/{calc_run.name}&file=debug.jsonl&line=2")
    page.wait_for_selector(".tok.trained")
    assert "add-2" in page.locator(".summary").inner_text()
    assert page.locator(".trajectory-row.selected td:nth-child(2)").inner_text() == "add-2"


def test_a_20k_token_trajectory_renders(page, serve, record_root: Path) -> None:
    open_run(page, serve(record_root).url, "long")
    page.locator(".trajectory-row").first.click()
    page.wait_for_selector(".tok.trained")
    turns = page.locator(".turn").count()
    tokens = page.locator(".tok").count()
    assert turns == LONG_TURNS
    assert tokens >= 20_000
    last = page.locator(".tok").last
    last.scroll_into_view_if_needed()
    last.hover()
    assert f"token {tokens - 1} ·" in page.locator("#tooltip").inner_text()
    page.screenshot(path=str(ARTIFACTS / "logview-long-trajectory.png"))


def test_prefix_break_is_marked_at_its_token(page, serve, tmp_path: Path, calc_run: Path) -> None:
    write_hint_run(tmp_path, calc_run)
    viewer = serve(tmp_path)
    page.goto(viewer.url)  # the only run opens by itself
    page.locator(".trajectory-row").first.click()
    page.wait_for_selector(".break-marker")
    (run,) = httpx.get(viewer.url + "api/runs", timeout=30).json()["runs"]
    params = {"run": run["id"], "file": "step_1.jsonl", "line": 0}
    (brk,) = httpx.get(viewer.url + "api/trajectory", params=params, timeout=30).json()["merge"]["breaks"]

    assert "1 prefix break" in page.locator(".summary").inner_text()
    assert page.locator(".turn .flag.break").all_inner_texts() == ["new sample: message_removed"]
    note = page.locator(".sample").nth(1).locator(".break-note")
    assert note.inner_text() == f"New sample after a prefix break: {brk['note']}"
    assert "message 4 (user) was removed" in note.inner_text()
    for k, kind in ((0, "parted"), (1, "starts")):
        marker = page.locator(".sample").nth(k).locator(f".break-marker.{kind}")
        assert "message_removed" in marker.inner_text()
        assert marker.get_attribute("title") == brk["note"]
        # The marker stands right before the first token the two prompts do not share.
        following = marker.evaluate("m => m.nextElementSibling.dataset.i")
        assert int(following) == brk["position"]
    page.locator(".sample").nth(1).locator(".break-marker").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "logview-prefix-break.png"))


def test_a_token_link_opens_the_page_and_leaves_the_address_bar(page, serve, record_root: Path) -> None:
    viewer = serve(record_root, token="browser-test-token-0123456789")
    assert httpx.get(viewer.url.split("?")[0] + "api/runs", timeout=30).status_code == 401
    page.goto(viewer.url)
    assert "token" not in page.url
    open_run(page, page.url, "calc")
    assert page.locator(".trajectory-row").count() == 10
    page.locator(".trajectory-row", has_text="add-1").first.click()
    page.wait_for_selector(".tok.trained")
    assert page.evaluate("document.cookie") == ""  # HttpOnly: scripts cannot read the token


def test_lines_that_are_not_trajectories_are_counted_not_shown(
    page, serve, tmp_path: Path, calc_run: Path
) -> None:
    run = tmp_path / "records" / "calc" / calc_run.name
    shutil.copytree(calc_run, run)
    with (run / "rollouts" / "debug.jsonl").open("a", encoding="utf-8") as out:
        out.write('{"task_id": 1}\n{"trajectory_id": "t", "reward": "lots"}\nnot json\n')
    open_run(page, serve(tmp_path / "records").url, "calc")
    assert page.locator(".trajectory-row").count() == 10
    expect(page.locator("#status")).to_contain_text("10 trajectories, 3 unreadable lines")
    page.locator(".trajectory-row").last.click()
    page.wait_for_selector(".summary")
    assert "explode" in page.locator(".summary").inner_text()


def test_runs_newest_first_with_their_status_fit_1280_pixels_and_steps_open_their_trajectories(
    browser, serve, tmp_path: Path, calc_run: Path
) -> None:
    import json
    import subprocess
    import sys

    from astuner.run_status import mark_ended, mark_running

    root = tmp_path / "records"
    finished, failed, killed = (
        root / "calc" / "20260101-000000",
        root / "calc" / "20260102-000000",
        root / "other" / "20260103-000000",
    )
    for run in (finished, failed, killed):
        shutil.copytree(calc_run, run)
        mark_running(run)
    mark_ended(finished, "finished")
    mark_ended(failed, "failed", "RuntimeError: the judge fell over")
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    status = json.loads((killed / "status.json").read_text())
    (killed / "status.json").write_text(json.dumps({**status, "pid": int(gone.stdout)}))
    # the failed run trained two steps: a rollout file and a metrics row each
    lines = (failed / "rollouts" / "debug.jsonl").read_text().splitlines(keepends=True)
    (failed / "rollouts" / "debug.jsonl").unlink()
    (failed / "rollouts" / "step_1.jsonl").write_text("".join(lines[:4]))
    (failed / "rollouts" / "step_2.jsonl").write_text("".join(lines[4:]))
    rows = [{"step": s, "train/reward_mean": 0.25 * s, "timing/step_s": 3.0} for s in (1, 2)]
    (failed / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    try:
        page.goto(serve(root).url)
        page.wait_for_selector(".run-row")
        order = page.eval_on_selector_all(".run-row", "rows => rows.map(r => r.dataset.run)")
        assert order == [
            "other/20260103-000000",
            "calc/20260102-000000",
            "calc/20260101-000000",
        ]  # newest first
        assert page.locator(".run-row .run-status").all_inner_texts() == ["killed", "failed", "finished"]
        failed_row = page.locator(".run-row.state-failed")
        assert "failed: RuntimeError: the judge fell over" in failed_row.get_attribute("title")
        red = failed_row.locator(".run-status").evaluate("e => getComputedStyle(e).color")
        assert red == "rgb(192, 57, 43)"
        assert page.locator("#runs th").all_inner_texts()[-1] == "mean judge reward"
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280
        widths = page.eval_on_selector("#runs", "box => [box.scrollWidth, box.clientWidth]")
        columns = page.eval_on_selector_all("#runs th", "ths => ths.map(t => t.offsetWidth)")
        assert widths[0] <= widths[1], f"the run list overflows its pane at 1280 pixels: {widths} {columns}"

        failed_row.click()
        page.wait_for_selector(".trajectory-row")
        page.click("#tabs button[data-tab=metrics]")
        caption = page.locator(".chart[data-key='train/reward_mean'] figcaption")
        assert caption.inner_text().splitlines() == ["mean judge reward (last 0.5000)", "train/reward_mean"]
        page.locator(".chart[data-key='train/reward_mean'] circle[data-step='2']").click()
        expect(page.locator(".trajectory-row")).to_have_count(len(lines) - 4)
        widths = page.eval_on_selector("#trajectories", "box => [box.scrollWidth, box.clientWidth]")
        assert widths[0] <= widths[1], f"the trajectory list overflows its pane at 1280 pixels: {widths}"
        steps = page.locator(".trajectory-row td:first-child").all_inner_texts()
        assert set(steps) == {"2"} and page.locator("select[name=step]").input_value() == "2"
        page.screenshot(path=str(ARTIFACTS / "logview-runs-status.png"))
    finally:
        context.close()


def test_an_agent_picked_in_the_list_filters_it_and_the_trajectory(
    page, serve, tmp_path: Path, calc_run: Path
) -> None:
    write_werewolf_run(tmp_path, calc_run)
    page.goto(serve(tmp_path).url)  # the only run opens by itself
    expect(page.locator(".trajectory-row")).to_have_count(5)
    page.select_option("select[name=agent]", "wolf")
    rows = page.locator(".trajectory-row")
    expect(rows).to_have_count(3)
    assert rows.locator("td.agents").all_inner_texts() == [
        "wolf 1.10 · seer 0.00 · villager 0.00",
        "wolf 0.00 · seer 1.00 · villager 1.00",
        "wolf 0.50 · seer 0.50 · villager 0.00",
    ]
    assert set(rows.locator(".agent.chosen").all_inner_texts()) == {"wolf 1.10", "wolf 0.00", "wolf 0.50"}

    rows.first.click()  # opens with the wolf's calls and sample only
    page.wait_for_selector(".tok.trained")
    turns = page.locator(".turn:visible")
    expect(turns).to_have_count(2)
    for head in turns.locator(".turn-head").all_inner_texts():
        assert head.startswith("call ") and " · wolf · adapter wolf-lora · " in head and "advantage " in head
    assert (
        page.locator(".sample:visible .sample-head")
        .all_inner_texts()[0]
        .startswith("sample 0 · agent wolf · adapter wolf-lora · ")
    )
    assert page.locator(".agent-row.selected td").first.inner_text() == "wolf"
    note = "showing wolf only: 4 calls and 2 samples of other agents hidden"
    assert page.locator(".agent-note").all_inner_texts() == [note, note]
    assert "agent=wolf" in page.url
    page.screenshot(path=str(ARTIFACTS / "logview-agents.png"))

    page.locator(".agent-row", has_text="villager").click()
    expect(page.locator(".turn:visible .agent-tag")).to_have_text(["villager", "villager"])
    assert "no adapter" in page.locator(".turn:visible .turn-head").first.inner_text()
    page.locator(".agent-row", has_text="all agents").click()
    expect(page.locator(".turn:visible")).to_have_count(6)
    expect(page.locator(".sample:visible")).to_have_count(3)


def test_the_lists_fit_1280_pixels_with_real_task_ids_and_name_each_run_s_backbone(
    browser, serve, tmp_path: Path, calc_run: Path
) -> None:
    import json

    from astuner.run_status import mark_ended, mark_running

    root = tmp_path / "records"
    trained, warmed = root / "calc" / "20260101-000000", root / "calc-sft" / "20260102-000000"
    for run, command in ((trained, "run"), (warmed, "sft")):
        shutil.copytree(calc_run, run)
        config = run / "config.yaml"
        config.write_text(config.read_text().replace("backbone: debug", "backbone: torch"))
        mark_running(run, command)
        mark_ended(run, "finished")
        # task ids as the built-in readers write them, and a flagged rollout among them
        records = run / "rollouts" / "debug.jsonl"
        rows = [json.loads(line) for line in records.read_text().splitlines()]
        for i, row in enumerate(rows):
            row["task_id"] = f"arith-train-{30000 + i:05d}"
        rows[0]["madness"] = ["nonsense"]
        flagged = sum(bool(row.get("madness")) for row in rows)
        records.write_text("".join(json.dumps(row) + "\n" for row in rows))

    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    try:
        page.goto(serve(root).url)
        page.wait_for_selector(".run-row")
        assert page.locator("#runs th").all_inner_texts()[3] == "backbone"
        assert page.locator(".run-row .run-backbone").all_inner_texts() == ["torch sft", "torch"]
        widths = page.eval_on_selector("#runs", "box => [box.scrollWidth, box.clientWidth]")
        assert widths[0] <= widths[1], f"the run list overflows its pane at 1280 pixels: {widths}"
        page.locator(".run-row[data-run='calc-sft/20260102-000000']").click()
        page.wait_for_selector(".trajectory-row")
        widths = page.eval_on_selector("#trajectories", "box => [box.scrollWidth, box.clientWidth]")
        assert widths[0] <= widths[1], f"the trajectory list overflows its pane at 1280 pixels: {widths}"
        assert page.locator(".trajectory-row td.verdict .flag.madness").count() == flagged
    finally:
        context.close()
