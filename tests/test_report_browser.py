"""The report page in real headless Chromium: it loads from file:// without a single network
request or console error, shows every section, and its filters hide and show rows.

A screenshot is kept as test-artifacts/report.png.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from runner.report import build_reports
from tests.test_report import CELLS, write_history

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
SECTIONS = ("latest", "changes", "grid", "flaky", "errors", "speedup", "failures")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]


def chromium() -> str:
    found = os.environ.get("REGRESS_CHROMIUM") or shutil.which("chromium")
    if not found:
        pytest.skip("no Chromium: install Debian's chromium or set $REGRESS_CHROMIUM")
    return found


@pytest.mark.browser
def test_the_report_works_offline_in_chromium(tmp_path):
    write_history(tmp_path / "history.sqlite")
    build_reports(tmp_path)
    requests, problems = [], []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("request", lambda r: r.url.startswith("file:") or requests.append(r.url))
            page.on("console", lambda m: m.type in ("error", "warning") and problems.append(m.text))
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto((tmp_path / "index.html").as_uri())

            for section in SECTIONS:
                assert page.locator(f"section#{section}").is_visible(), section
            grid_rows = page.locator("#grid tbody tr")
            total = grid_rows.count()
            assert total == len(CELLS) + 1

            def visible_grid_rows() -> list[str]:
                return [
                    grid_rows.nth(i).get_attribute("data-backend") or ""
                    for i in range(total)
                    if grid_rows.nth(i).is_visible()
                ]

            page.select_option("select[name=backend]", "wgpu")
            assert visible_grid_rows() == ["wgpu"] * sum(
                c.backend == "wgpu" for c in CELLS.values()
            )
            assert page.locator("#changes tbody tr:visible").count() == 1  # the new failure

            page.select_option("select[name=backend]", "")
            page.select_option("select[name=bundle]", "jsep")
            assert len(visible_grid_rows()) == sum(c.bundle == "jsep" for c in CELLS.values())

            page.select_option("select[name=bundle]", "")
            page.select_option("select[name=verdict]", "capture-mismatch")
            assert len(visible_grid_rows()) == 1
            assert page.locator("#failures details:visible").count() == 1

            page.click("#clear")
            assert len(visible_grid_rows()) == total
            shown = page.locator("#shown").text_content()
            assert shown.startswith(f"{page.locator('[data-filter]').count()} of ")

            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
        finally:
            browser.close()
    assert requests == []
    assert problems == []
