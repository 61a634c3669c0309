"""How big the report is and how fast it opens, as docs/reports.md figures are measured:
``python -m runner.tools.report_timing [OUT]`` opens OUT/index.html from disk in headless Chromium,
then opens its case-by-run fold (data.js loaded, its rows inserted), and prints what it took.

Measured, not asserted: timings depend on the machine (docs/ci.md, "Tests").
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

from playwright.sync_api import sync_playwright

from runner.backends.ortweb.browser import chromium_flags, find_chromium
from runner.report.model import DATA_FILE

FOLD = "#grid details.fold"


@dataclass(frozen=True)
class Measurement:
    page_bytes: int
    data_bytes: int
    load_ms: float  # navigation start to the end of the load event (the page's own timing)
    fold_ms: float | None  # opening the case-by-run fold until its rows are in; None: no fold
    rows: int  # filterable rows on the page once that fold is open
    problems: list[str]  # console errors and warnings, page errors
    requests: list[str]  # anything but file: URLs

    def __str__(self) -> str:
        fold = "no fold" if self.fold_ms is None else f"fold opened in {self.fold_ms:.0f} ms"
        return (
            f"index.html {self.page_bytes / 1e6:.2f} MB, {DATA_FILE} "
            f"{self.data_bytes / 1e6:.2f} MB; loaded in {self.load_ms:.0f} ms, {fold}, "
            f"{self.rows} rows; {len(self.problems)} console problems, "
            f"{len(self.requests)} requests"
        )


def measure(out: Path, chromium: str | None = None) -> Measurement:
    page_path, data_path = out / "index.html", out / DATA_FILE
    requests: list[str] = []
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(find_chromium(chromium).path),
            args=["--headless=new", *chromium_flags()],
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("request", lambda r: r.url.startswith("file:") or requests.append(r.url))
            page.on("console", lambda m: m.type in ("error", "warning") and problems.append(m.text))
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto(page_path.as_uri(), wait_until="load")
            load_ms = page.evaluate(
                "() => performance.getEntriesByType('navigation')[0].loadEventEnd"
            )
            fold_ms = None
            if page.locator(FOLD).count():
                start = time.perf_counter()
                page.click(f"{FOLD} > summary")
                page.wait_for_selector(f"{FOLD} [data-filled]", state="attached")
                fold_ms = (time.perf_counter() - start) * 1000
            rows = page.locator("[data-filter]").count()
        finally:
            browser.close()
    data_bytes = data_path.stat().st_size if data_path.exists() else 0
    return Measurement(
        page_path.stat().st_size, data_bytes, load_ms, fold_ms, rows, problems, requests
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, default=Path("reports"))
    parser.add_argument("--chromium", help="Chromium executable (or $REGRESS_CHROMIUM)")
    args = parser.parse_args()
    print(measure(args.out, args.chromium))


if __name__ == "__main__":
    main()
