"""Screenshots of the Prefect UI for docs/pipeline.md, from a real run (not a test).

    .venv/bin/python scripts/docs_screenshots.py docs/img           # the shipped configs (~14 min on 2 cores)
    .venv/bin/python scripts/docs_screenshots.py docs/img --short   # short budgets, a KL term (~4 min)

Starts a `prefect server` on loopback (state in a temp dir), runs the sft-rm-ppo flow against it
(embedded Ray head, local store), then opens the flow run in Debian's Chromium (tests/browser.py)
and saves: the flow run page, the report artifact, the PPO curve artifact and the PPO model
artifact. Stops the server by PID.
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

SHORT = {"sft": {"max_steps": 300, "eval_steps": 100, "save_steps": 100, "logging_steps": 10},
         "rm": {"max_steps": 60, "eval_steps": 30, "save_steps": 30},
         "ppo": {"max_samples": 512, "num_episodes": 1, "init_kl_coef": 0.01, "save_steps": 8}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(out: Path, short: bool) -> None:
    home = Path(tempfile.mkdtemp(prefix="alignflow-shots-"))
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(home / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_UI_API_URL": api}
    server = subprocess.Popen([str(Path(sys.executable).parent / "prefect"), "server", "start", "--host", "127.0.0.1",
                               "--port", str(port)], env=env, stdout=open(home / "server.log", "w"),
                              stderr=subprocess.STDOUT)
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{api}/health", timeout=2).read()
                break
            except OSError:
                time.sleep(0.5)
        os.environ.update(PREFECT_API_URL=api, PREFECT_HOME=env["PREFECT_HOME"])
        from prefect.context import FlowRunContext  # noqa: F401  (prefect reads its settings on import)

        from alignflow.flows.sft_rm_ppo import sft_rm_ppo_flow
        state = asyncio.run(sft_rm_ppo_flow(run_name="docs", store=str(home / "store"), return_state=True,
                                          **(SHORT if short else {})))
        run_id = str(state.state_details.flow_run_id)
        shoot(api.removesuffix("/api"), run_id, out)
    finally:
        server.terminate()
        server.wait(timeout=60)


def shoot(ui: str, run_id: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    from tests.browser import chromium
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{ui}/runs/flow-run/{run_id}")
        page.get_by_text("Artifacts", exact=True).first.click(timeout=60_000)
        page.wait_for_timeout(3000)
        page.screenshot(path=str(out / "prefect-flow-run.png"))
        # the UI scrolls inside its own container: a tall window shows a whole artifact
        for key, height in (("docs-sft-rm-ppo-report", 2600), ("docs-ppo-curve", 1250), ("docs-ppo-model", 700)):
            page.set_viewport_size({"width": 1400, "height": height})
            page.goto(f"{ui}/artifacts/key/{key}")
            page.wait_for_selector("img" if key.endswith(("report", "curve")) else "pre", timeout=60_000)
            page.wait_for_timeout(2000)
            page.screenshot(path=str(out / f"prefect-{key.removeprefix('docs-')}.png"))
        browser.close()


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--short"]
    main(Path(args[0] if args else REPO / "docs" / "img"), "--short" in sys.argv[1:])
