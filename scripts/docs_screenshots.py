"""Screenshots of the Prefect UI for docs/pipeline.md, from a real run (not a test).

    .venv/bin/python scripts/docs_screenshots.py docs/img           # the shipped configs (~14 min on 2 cores)
    .venv/bin/python scripts/docs_screenshots.py docs/img --short   # short budgets, a KL term (~4 min)
    .venv/bin/python scripts/docs_screenshots.py docs/img UI_URL FLOW_RUN_ID   # a run already on a server
    .venv/bin/python scripts/docs_screenshots.py docs/img --compare SFT_MODEL  # the compare flow (~3 min)

Starts a `prefect server` on loopback (state in a temp dir), runs the sft-rm-ppo flow against it
(embedded Ray head, local store), then opens the flow run in Debian's Chromium (tests/browser.py)
and saves: the flow run page, the report artifact, the PPO curve artifact and the PPO model
artifact. With --compare: runs the `compare` flow's two DPO learning rates from SFT_MODEL (short budgets)
and saves its comparison chart and table artifacts. Stops the server by PID.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SHORT = {
    "sft": {"max_steps": 300, "eval_steps": 100, "save_steps": 100, "logging_steps": 10},
    "rm": {"max_steps": 60, "eval_steps": 30, "save_steps": 30},
    "ppo": {"max_samples": 512, "num_episodes": 1, "init_kl_coef": 0.01, "save_steps": 8},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


COMPARE = {"max_steps": 40, "eval_steps": 20, "logging_steps": 5, "save_steps": -1}


def main(out: Path, short: bool, compare_from: str | None = None) -> None:
    home = Path(tempfile.mkdtemp(prefix="alignflow-shots-"))
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {
        **os.environ,
        "PREFECT_HOME": str(home / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_UI_API_URL": api,
    }
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=open(home / "server.log", "w"),
        stderr=subprocess.STDOUT,
    )
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{api}/health", timeout=2).read()
                break
            except OSError:
                time.sleep(0.5)
        os.environ.update(PREFECT_API_URL=api, PREFECT_HOME=env["PREFECT_HOME"])

        if compare_from:
            from alignflow.flows.compare import compare_flow

            asyncio.run(
                compare_flow(
                    run_name="docs",
                    store=str(home / "store"),
                    recipe="tiny",
                    stage="dpo",
                    shared={"pretrain": compare_from, **COMPARE},
                    evaluate={"max_samples": 300},
                    variants={"lr-5e-5": {"learning_rate": 5e-5}, "lr-2e-4": {"learning_rate": 2e-4}},
                )
            )
            shoot_artifacts(api.removesuffix("/api"), {"comparison-chart": 1300, "comparison": 700}, out)
            return
        from alignflow.flows.sft_rm_ppo import sft_rm_ppo_flow

        state = asyncio.run(
            sft_rm_ppo_flow(
                run_name="docs",
                store=str(home / "store"),
                return_state=True,
                recipe="tiny",
                heldout_eval=True,
                **(SHORT if short else {}),
            )
        )
        run_id = str(state.state_details.flow_run_id)
        shoot(api.removesuffix("/api"), run_id, out)
    finally:
        server.terminate()
        server.wait(timeout=60)


def latest_artifact_ids(api: str, keys: list[str]) -> dict[str, str]:
    from prefect.client.orchestration import PrefectClient
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    async def read() -> dict[str, str]:
        async with PrefectClient(api) as client:
            found = await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys)), sort=ArtifactSort.CREATED_DESC
            )
        latest: dict[str, str] = {}
        for a in found:
            latest.setdefault(a.key, str(a.id))
        return latest

    return asyncio.run(read())


def shoot(ui: str, run_id: str, out: Path) -> None:
    """The flow run page, the curve's versions (redrawn while the stage ran), and the latest
    version of the report, the PPO curve and the PPO model artifacts."""
    from playwright.sync_api import sync_playwright

    from tests.browser import chromium

    out.mkdir(parents=True, exist_ok=True)
    pages = {"sft-rm-ppo-report": 2600, "ppo-curve": 1250, "ppo-model": 650}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{ui}/runs/flow-run/{run_id}")
        page.get_by_text("Artifacts", exact=True).first.click(timeout=60_000)
        page.wait_for_timeout(3000)
        page.screenshot(path=str(out / "prefect-flow-run.png"))
        page.goto(f"{ui}/artifacts/key/docs-ppo-curve")
        page.get_by_text("Created docs-ppo-curve").wait_for(timeout=60_000)
        page.screenshot(path=str(out / "prefect-curve-versions.png"))
        browser.close()
    shoot_artifacts(ui, pages, out)


def shoot_artifacts(ui: str, pages: dict[str, int], out: Path) -> None:
    """The latest version of each artifact `docs-<name>`, in a window `height` pixels tall."""
    from playwright.sync_api import sync_playwright

    from tests.browser import chromium

    ids = latest_artifact_ids(f"{ui}/api", [f"docs-{k}" for k in pages])
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        for name, height in pages.items():  # the UI scrolls inside its own container: a tall window
            page.set_viewport_size({"width": 1400, "height": height})
            page.goto(f"{ui}/artifacts/artifact/{ids['docs-' + name]}")
            page.get_by_text("Show raw data").wait_for(timeout=60_000)
            page.wait_for_timeout(1500)
            page.screenshot(path=str(out / f"prefect-{name}.png"))
        browser.close()


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--short"]
    if "--compare" in args:
        where = args.index("--compare")
        main(Path(args[0]), False, os.path.abspath(args[where + 1]))
    elif len(args) == 3:  # OUT UI FLOW_RUN_ID: screenshots of an existing run on a running server
        shoot(args[1], args[2], Path(args[0]))
    else:
        main(Path(args[0] if args else REPO / "docs" / "img"), "--short" in sys.argv[1:])
