"""Chaos in a real flow (Prefect → Ray job → DeepSpeed): the network between the worker and the
Ray head cut mid-stage, and a stage that hangs. Marked `chaos` (`make test-chaos`, run by CI)."""
from __future__ import annotations

import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.tcp_proxy import CuttableProxy
from tests.test_stage_runner import flow_logs, ray_jobs, run_flow

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


def test_log_stream_cut_and_hung_stage(ray_head, tmp_path, monkeypatch):
    """The flow reaches the head through a proxy. When the first checkpoint is committed the
    proxy resets every connection (the job's log stream included): the job keeps running and the
    task follows it again. At step 8 (after its checkpoint) the trainer hangs, silent: the
    heartbeat stops the job, Prefect retries the stage, it resumes from step 8 and completes."""
    head = urlsplit(ray_head)
    proxy = CuttableProxy(head.hostname, head.port)
    monkeypatch.setenv("ALIGNFLOW_HANG_AT_STEP", "8")
    monkeypatch.setenv("ALIGNFLOW_STAGE_HEARTBEAT_S", "45")
    store = tmp_path / "store"
    done = threading.Event()
    first_ckpt = None

    def watch() -> None:
        nonlocal first_ckpt
        while not done.is_set() and first_ckpt is None:
            found = list(store.glob("chaos/sft-*/checkpoints/global_step4/MANIFEST.json"))
            first_ckpt = found[0] if found else None
            time.sleep(0.2)
        if first_ckpt is not None:
            proxy.cut()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result, run_id = run_flow(run_name="chaos", store=str(store), ray_address=f"http://127.0.0.1:{proxy.port}",
                                  sft={"max_steps": 12, "save_steps": 4, "eval_dataset": None, "logging_steps": 1},
                                  retries=2)
    finally:
        done.set()
        proxy.close()
    assert proxy.cuts >= 1 and first_ckpt is not None
    logs = flow_logs(run_id)
    assert "broke" in logs and "reconnecting to its log" in logs, logs[-3000:]
    assert "logged nothing for 45s" in logs and "stopped as hung" in logs, logs[-3000:]
    jobs = [j for j in ray_jobs(ray_head, "chaos") if j.metadata["alignflow_stage"] == "sft"]
    assert jobs[-1].status.value == "SUCCEEDED" and "STOPPED" in {j.status.value for j in jobs[:-1]}
    from ray.job_submission import JobSubmissionClient
    last = JobSubmissionClient(ray_head).get_job_logs(jobs[-1].submission_id)
    assert "global_step8" in last and "ran optimizer steps 9..12 of 12" in last, last[-3000:]
    assert Path(result["model_uri"], "MANIFEST.json").exists()
