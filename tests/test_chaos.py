"""Chaos in a real flow (Prefect → Ray job → DeepSpeed): the network between the worker and the
Ray head cut mid-stage, a stage that hangs, and the store (SeaweedFS S3) down for 30 s mid-stage.
Marked `chaos` (`make test-chaos`, run by CI)."""

from __future__ import annotations

import re
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests import fixtures_seaweed
from tests.fixtures_s3 import BUCKET, point_env_at
from tests.flow_runs import flow_logs, ray_jobs, run_flow
from tests.tcp_proxy import CuttableProxy

seaweed = fixtures_seaweed.seaweed  # the fixture: a SeaweedFS S3 server for one test

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


def test_log_stream_cut_and_hung_stage(ray_head, tiny_base, tmp_path, monkeypatch):
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
            found = list(store.glob("hang/sft-*/checkpoints/global_step4/MANIFEST.json"))
            first_ckpt = found[0] if found else None
            time.sleep(0.2)
        if first_ckpt is not None:
            proxy.cut()

    # its own run name: the kill -9 test reads every job of run "chaos" on the same head
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result, run_id = run_flow(
            run_name="hang",
            store=str(store),
            ray_address=f"http://127.0.0.1:{proxy.port}",
            sft={
                "pretrain": str(tiny_base),
                "max_steps": 12,
                "save_steps": 4,
                "eval_dataset": None,
                "logging_steps": 1,
            },
            retries=2,
        )
    finally:
        done.set()
        proxy.close()
    assert proxy.cuts >= 1 and first_ckpt is not None
    logs = flow_logs(run_id)
    assert "broke" in logs and "reconnecting to its log" in logs, logs[-3000:]
    assert "logged nothing for 45s" in logs and "stopped as hung" in logs, logs[-3000:]
    jobs = [j for j in ray_jobs(ray_head, "hang") if j.metadata["alignflow_stage"] == "sft"]
    assert jobs[-1].status.value == "SUCCEEDED" and "STOPPED" in {j.status.value for j in jobs[:-1]}
    from ray.job_submission import JobSubmissionClient

    last = JobSubmissionClient(ray_head).get_job_logs(jobs[-1].submission_id)
    assert "global_step8" in last and "ran optimizer steps 9..12 of 12" in last, last[-3000:]
    assert Path(result["model_uri"], "MANIFEST.json").exists()


def test_store_down_30s_mid_stage(ray_head, seaweed, tmp_path, monkeypatch):
    """The store is a SeaweedFS S3 server (persistent, unlike moto). When the stage commits its
    first checkpoint the server is stopped (SIGTERM, SIGKILL after 3 s), kept down for 30 s and
    started again on the same ports and data. The stage survives, or fails with exit 75 and is
    retried and resumes from the newest committed checkpoint; nothing committed is lost: what was
    committed before the outage is unchanged, and the model and every checkpoint (all kept:
    max_ckpt_num 4) verify against their manifests."""
    from ray.job_submission import JobSubmissionClient
    from safetensors.torch import load_file

    from alignment import storage

    # The session's Ray head has the suite's keys in its environment ("testing" / PLANTED_SECRET,
    # which the SeaweedFS identity uses too) and each job gets AWS_ENDPOINT_URL_S3 from this
    # process (alignflow/tasks/cluster/ray_job.PASSED_ENV): pointing this process at SeaweedFS points the jobs there,
    # without a second Ray head on a 2-core machine.
    point_env_at(monkeypatch, seaweed.endpoint)
    # 9 tries per store operation (~55 s: 0.2..25.6 s of backoff between them; s3fs's own retries are off
    # since the read timeout landed, which made each try shorter) instead of the default 5, in
    # this process and, through PASSED_ENV, in the jobs: a 30 s outage then costs one task retry, not all of
    # them (each failed try, the job's exit 75 or the task's own StoreUnavailable, uses one retry).
    monkeypatch.setenv("ALIGNFLOW_STORE_RETRIES", "9")
    store = f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"
    fs, root = storage.filesystem(store)
    down_for_s = 30.0
    outage: dict = {}
    done = threading.Event()

    def chaos() -> None:
        pattern = f"{root}/storedown/sft-*/checkpoints/global_step4/MANIFEST.json"
        while not done.is_set():
            try:
                found = fs.glob(pattern)
            except OSError:
                found = []
            if found:
                break
            time.sleep(0.2)
        else:
            return
        first = "s3://" + found[0].rsplit("/", 1)[0]
        base = f"{store}/storedown/" + fs.glob(f"{root}/storedown/tiny_base-*")[0].rsplit("/", 1)[1] + "/model"
        outage["before"] = {uri: storage.read_manifest(uri) for uri in (first, base)}
        outage["stopped_at"], outage["wall_down"] = time.monotonic(), time.strftime("%H:%M:%S")
        outage["stop_s"] = seaweed.stop()
        done.wait(down_for_s)
        outage["ready_s"] = seaweed.start()
        outage["down_s"] = time.monotonic() - outage["stopped_at"]  # refused connections until S3 answered
        outage["wall_up"] = time.strftime("%H:%M:%S")

    watcher = threading.Thread(target=chaos, daemon=True)
    watcher.start()
    t0 = time.monotonic()
    try:
        result, run_id = run_flow(
            run_name="storedown",
            store=store,
            ray_address=ray_head,
            retries=3,
            sft={"max_steps": 16, "save_steps": 4, "max_ckpt_num": 4, "eval_dataset": None, "logging_steps": 1},
        )
    finally:
        flow_s = time.monotonic() - t0
        done.set()
        watcher.join(timeout=120)
    assert "wall_up" in outage, f"the store was never stopped and restarted mid-stage: {outage}"
    assert outage["down_s"] >= down_for_s

    # nothing committed is lost: what was committed before the outage is unchanged, and the model
    # and every checkpoint download and verify (sizes and sha256) against their manifests
    for uri, manifest in outage["before"].items():
        assert storage.read_manifest(uri) == manifest, uri
        storage.download_dir(uri, tmp_path / uri.rsplit("/", 2)[-2] / uri.rsplit("/", 1)[-1], verify=True)
    model_uri = result["model_uri"]
    assert model_uri.startswith(store) and not result["skipped"]
    model = storage.download_dir(model_uri, tmp_path / "model", verify=True)
    assert load_file(model / "model.safetensors")
    ckpts = f"{model_uri.rsplit('/', 1)[0]}/checkpoints"
    committed = storage.list_committed(ckpts)
    assert committed == ["global_step4", "global_step8", "global_step12", "global_step16"], committed
    assert storage.get_latest(ckpts) == f"{ckpts}/global_step16"
    for name in committed:
        storage.download_dir(f"{ckpts}/{name}", tmp_path / "ckpt" / name, verify=True)

    # survived (one job) or retried (exit 75, then a job that resumed from a checkpoint): the job logs say which
    jobs = [j for j in ray_jobs(ray_head, "storedown") if j.metadata["alignflow_stage"] == "sft"]
    client = JobSubmissionClient(ray_head)
    logs = [client.get_job_logs(j.submission_id) for j in jobs]
    assert jobs[-1].status.value == "SUCCEEDED", [j.status.value for j in jobs]
    ran = re.search(r"ran optimizer steps (\d+)\.\.16 of 16", logs[-1])
    assert ran, logs[-1][-3000:]
    if len(jobs) == 1:
        redone, outcome = 0, "survived (one job, no retry)"
        assert ran.group(1) == "1"
    else:
        for job, log in zip(jobs[:-1], logs[:-1]):
            assert job.status.value == "FAILED" and "exit code 75" in (job.message or ""), (job.message, log[-2000:])
            # the rank's StoreUnavailable reaches the job's driver, which prints the CLI's one line and exits 75
            assert re.search(
                r"^error: .*\(a transient fault: run it again later; a flow retries it\)$", log, re.M
            ), log[-2000:]
        resumed = re.search(r"resumed from \S+/global_step(\d+) ", logs[-1])
        assert resumed and int(resumed.group(1)) >= 4, logs[-1][-3000:]
        assert ran.group(1) == str(int(resumed.group(1)) + 1)  # nothing before the checkpoint is redone
        # a failed job got as far as the checkpoint it was committing (named in its error), or the last it
        # committed; none named: it failed after the manifest of the one it resumed from, writing `latest`
        # or applying retention (the outage starts when global_step4's manifest appears)
        reached = max(
            (int(n) for log in logs[:-1] for n in re.findall(r"global_step(\d+)", log)), default=int(resumed.group(1))
        )
        redone = reached - int(resumed.group(1))
        outcome = f"failed with exit 75, retried, resumed from global_step{resumed.group(1)}"
    print(
        f"\nstore down {outage['down_s']:.1f}s ({outage['wall_down']}..{outage['wall_up']}; SIGTERM/SIGKILL "
        f"took {outage['stop_s']:.1f}s, S3 answered {outage['ready_s']:.1f}s after the restart); stage {outcome}; "
        f"tries {len(jobs)} ({[j.status.value for j in jobs]}); steps redone {redone}; flow {flow_s:.0f}s"
    )
    print(
        "\n".join(
            line
            for line in flow_logs(run_id).splitlines()
            if re.search(r"retr|resum|StoreUnavailable|exit 75|committed|error:", line)
        )[-3000:]
    )
