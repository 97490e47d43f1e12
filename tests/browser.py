"""A real browser on the Prefect UI: Debian's Chromium driven by Playwright for Python.

The UI is a single-page app: each step waits for the element it needs rather than for time.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest


def chromium() -> str:
    """Chromium's path; a missing browser fails where the browser test must run (CI sets
    ALIGNFLOW_REQUIRE_BROWSER=1; `make test` installs it with apt-get as root), else skips."""
    path = shutil.which("chromium")
    if path:
        return path
    message = "no chromium on PATH: scripts/install_browser.sh installs Debian's (as root)"
    if os.environ.get("ALIGNFLOW_REQUIRE_BROWSER") == "1":
        pytest.fail(message)
    pytest.skip(message)


@dataclass
class RenderedArtifact:
    url: str
    images: list[int]  # natural width of each <img> (0: broken)
    rows: list[str]  # text of each table row
    text: str


def open_flow_run_artifact(ui: str, flow_run_id: str, key: str, screenshots: Path | None = None) -> RenderedArtifact:
    """Open the flow run's page, its Artifacts tab, then the artifact `key`, as a user clicks."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{ui}/runs/flow-run/{flow_run_id}")
            page.get_by_text("Artifacts", exact=True).first.click(timeout=60_000)
            page.get_by_text(key, exact=True).last.click(timeout=60_000)
            page.wait_for_url("**/artifacts/artifact/**", timeout=60_000)
            wait_for_images(page, key)
            if screenshots is not None:
                screenshots.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(screenshots / f"{key}.png"), full_page=True)
            return RenderedArtifact(
                page.url,
                page.eval_on_selector_all("img", "els => els.map(e => e.naturalWidth)"),
                page.eval_on_selector_all("table tr", "els => els.map(e => e.innerText)"),
                page.inner_text("body"),
            )
        finally:
            browser.close()


def wait_for_images(page, key: str) -> None:
    """The artifact's pictures, loaded. On a loaded machine the single-page app once stayed on its
    skeleton for a minute (a CI run): one reload of the artifact's own page, then a failure that shows
    what the page held instead."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(2):
        try:
            page.wait_for_selector("img", state="attached", timeout=45_000)
            page.wait_for_function("[...document.images].every(i => i.complete)", timeout=45_000)
            return
        except PlaywrightTimeout:
            if attempt == 0:
                page.reload()
    raise AssertionError(
        f"{key}: no picture on {page.url} after a reload; the page said:\n{page.inner_text('body')[-1500:]}"
    )
