"""Fixtures: real experiment folders (see `logview_records`), viewers on free ports, and pages in
headless Chromium (Debian's `chromium`) driven by Playwright for the browser tests."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from astuner_logview.server import LogviewServer, start_logview
from logview_records import TASKS, debug_run

from astuner.testing.tokenizers import qwen25_tokenizer


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("qwen25-tokenizer")
    qwen25_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def record_root(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Path:
    """`launcher_record/` with experiment `calc` (10 trajectories) and `long` (one of ~20k tokens).

    The `calc` run also gets a `metrics.jsonl` in the form training
    backbones write (the debug backbone writes none), for the charts.
    """
    root = tmp_path_factory.mktemp("record")
    calc = debug_run(root, tokenizer_dir, "calc", "calc_agent", TASKS, repeat=2)
    rows = [
        {"step": s, "reward/mean": 0.1 * s, "success/rate": 0.05 * s, "tokens/mean": 100 + s, "time/s": 2.0}
        for s in range(1, 6)
    ]
    rows[0]["reward/std"] = float("nan")
    for row in rows:  # from step 3 on, no group has a learning signal: a health warning
        row["train/zero_adv_group_frac"] = 1.0 if row["step"] >= 3 else 0.25
    (calc / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    long_task = {"id": "long-1", "question": "talk", "answer": ""}
    debug_run(root, tokenizer_dir, "long", "long_chat", [long_task], repeat=1)
    return root / "launcher_record"


@pytest.fixture(scope="session")
def calc_run(record_root: Path) -> Path:
    (run,) = (record_root / "calc").iterdir()
    return run


@pytest.fixture
def serve() -> Iterator:
    """`serve(path, **kwargs)` starts a viewer on a free port; all are stopped after the test."""
    started: list[LogviewServer] = []

    def start(path: Path, **kwargs: object) -> LogviewServer:
        viewer = start_logview(path, port=0, **kwargs)
        started.append(viewer)
        return viewer

    yield start
    for viewer in started:
        viewer.stop()


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator:
    """Headless Chromium; the test is skipped where Playwright or Chromium is missing."""
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="browser tests need `pip install playwright`"
    )
    if not Path(CHROMIUM).exists():
        pytest.skip("needs Chromium: apt-get install -y chromium chromium-driver")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser) -> Iterator:
    """A fresh tab; the test fails if the page's script raised."""
    context = browser.new_context(viewport={"width": 1500, "height": 950})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    context.close()
    assert errors == [], errors
