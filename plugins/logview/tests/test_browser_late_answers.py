"""The viewer page when the server answers out of order, as on a busy machine.

Each test holds one request back (Playwright routing) until the user has
moved on, then lets it through: the late answer must not replace what the
user opened after asking for it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from logview_records import write_hint_run

sync_api = pytest.importorskip("playwright.sync_api", reason="browser tests need `pip install playwright`")
expect = sync_api.expect


class LateAnswer:
    """Holds back the first request whose URL matches `pattern` until `.release()`; later ones pass."""

    def __init__(self, page, pattern: str) -> None:
        self.page = page
        self.routes: list = []
        page.route(pattern, self._hold)

    def _hold(self, route) -> None:
        if self.routes:
            route.continue_()
        else:
            self.routes.append(route)

    def release(self) -> None:
        """Let the held request through and return once the page has had its answer."""
        (route,) = self.routes
        url = route.request.url
        with self.page.expect_request_finished(lambda request: request.url == url):
            route.continue_()
        # A round trip through the page's own fetch: the late answer reached the page before this one.
        self.page.evaluate("() => fetch('/api/runs').then((answer) => answer.json())")


def test_a_late_metrics_answer_leaves_the_trajectory_opened_meanwhile(
    page, serve, tmp_path: Path, calc_run: Path
) -> None:
    write_hint_run(tmp_path, calc_run)
    metrics = LateAnswer(page, "**/api/metrics?*")
    page.goto(serve(tmp_path).url)  # the only run opens by itself, on its Metrics tab
    page.locator(".trajectory-row").first.click()  # before the metrics have come
    page.wait_for_selector(".break-marker")
    metrics.release()

    expect(page.locator(".summary")).to_contain_text("1 prefix break")
    assert page.locator("#detail .metrics").count() == 0
    assert page.locator("#tabs button.active").inner_text() == "Trajectory"
    page.click("#tabs button[data-tab=metrics]")  # asked for again, the metrics still show
    expect(page.locator("#detail .metrics")).to_contain_text("No metrics.jsonl")


def test_a_late_trajectory_answer_leaves_the_trajectory_picked_after_it(
    page, serve, record_root: Path, calc_run: Path
) -> None:
    first = LateAnswer(page, "**/api/trajectory?*")
    page.goto(f"{serve(record_root).url}#run=calc/{calc_run.name}")
    rows = page.locator(".trajectory-row")
    rows.nth(0).click()
    rows.nth(2).click()
    expect(page.locator(".summary")).to_contain_text("add-2")
    first.release()

    expect(page.locator(".summary")).to_contain_text("add-2")
    assert page.locator(".trajectory-row.selected td:nth-child(2)").inner_text() == "add-2"
    assert "line=2" in page.url
    page.click("#tabs button[data-tab=config]")
    page.click("#tabs button[data-tab=trajectory]")  # the tab shows the trajectory picked last
    expect(page.locator(".summary")).to_contain_text("add-2")


def test_a_late_list_answer_leaves_the_list_filtered_after_it(
    page, serve, record_root: Path, calc_run: Path
) -> None:
    page.goto(f"{serve(record_root).url}#run=calc/{calc_run.name}")
    expect(page.locator(".trajectory-row")).to_have_count(10)
    errors_only = LateAnswer(page, "**/api/trajectories?*error=yes*")
    page.select_option("select[name=error]", "yes")
    page.select_option("select[name=error]", "")
    expect(page.locator("#status")).to_contain_text("10 trajectories")
    errors_only.release()

    expect(page.locator(".trajectory-row")).to_have_count(10)
    assert page.locator("select[name=error]").input_value() == ""
