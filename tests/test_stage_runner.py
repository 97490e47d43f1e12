"""The stage runner for real: Prefect (ephemeral API) -> Ray job on a local head -> DeepSpeed,
with the store on a real S3-compatible server (moto_server) or a local directory."""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from alignflow.flows.sft import sft_flow
from alignflow.tasks.cluster.ray_cluster import RayClusterError
from alignment import storage
from alignment.config import ConfigError
from alignment.storage import StorageError
from tests.fixtures_s3 import PLANTED_SECRET, free_port, stop_process
from tests.flow_runs import QUICK, flow_logs, rank_pids, ray_jobs, run_flow

pytestmark = pytest.mark.integration


@pytest.mark.chaos  # a kill -9 test: runs with the chaos suite (`make test-chaos`), which CI runs too
def test_killed_rank_fails_the_job_and_the_retry_resumes_and_matches(ray_head, tiny_base, tmp_path):
    """kill -9 of one of the stage's two ranks mid-stage: the job fails, the task retries, the retry
    resumes from the newest committed checkpoint, and the model equals an uninterrupted run's."""
    store = str(tmp_path / "store")
    cfg = {
        "pretrain": str(tiny_base),  # the session's base: no tiny_base stage (a Ray job) in either flow
        "max_steps": 12,
        "save_steps": 3,
        "eval_dataset": None,
        "logging_steps": 1,
        "train_batch_size": 32,
        "micro_train_batch_size": 16,
        "num_gpus_per_node": 2,
    }
    outcome: dict = {}

    def flow_in_background():
        try:
            outcome["run"] = run_flow(run_name="killed", store=store, ray_address=ray_head, sft=cfg)
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            outcome["error"] = e

    import psutil
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(ray_head)
    runner = threading.Thread(target=flow_in_background)
    runner.start()
    killed_at = None
    deadline = time.monotonic() + 300
    while killed_at is None and time.monotonic() < deadline and runner.is_alive():
        for job in ray_jobs(ray_head, "killed"):
            if job.metadata.get("alignflow_stage") != "sft" or job.status.value != "RUNNING":
                continue
            ckpt = f"{job.metadata['alignflow_output']}/checkpoints"
            ranks = rank_pids(client, job.submission_id) if storage.list_committed(ckpt) else []
            if len(ranks) == 2:
                psutil.Process(ranks[-1]).kill()  # SIGKILL to one rank, mid-stage
                killed_at = storage.get_latest(ckpt)
        time.sleep(0.05)
    runner.join(timeout=600)
    assert killed_at is not None, "the job finished before a rank could be killed mid-stage"
    assert "run" in outcome, f"the flow failed: {outcome.get('error')!r}"
    result = outcome["run"][0]
    sft_jobs = [j for j in ray_jobs(ray_head, "killed") if j.metadata["alignflow_stage"] == "sft"]
    assert [j.status.value for j in sft_jobs] == ["FAILED", "SUCCEEDED"]
    # the stage's wall time counts both tries, not the last alone (Ray's job times are in ms)
    jobs_s = [(j.end_time - j.start_time) / 1000 for j in sft_jobs]
    assert result["stage_tries"] == 2 and result["stage_wall_s"] >= sum(jobs_s), (result, jobs_s)
    resumed_log = client.get_job_logs(sft_jobs[1].submission_id)
    # the other rank may commit one more checkpoint before Ray stops it: the retry takes the newest
    resumed = re.search(r"resumed from (\S+/global_step(\d+)) ", resumed_log)
    assert resumed and int(resumed.group(2)) >= int(killed_at.rsplit("global_step", 1)[1]), resumed_log[-3000:]
    assert f"ran optimizer steps {int(resumed.group(2)) + 1}..12 of 12" in resumed_log  # nothing before it redone

    clean, _ = run_flow(run_name="uninterrupted", store=store, ray_address=ray_head, sft=cfg)
    a = load_file(Path(result["model_uri"]) / "model.safetensors")
    b = load_file(Path(clean["model_uri"]) / "model.safetensors")
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst < 1e-5, worst
    print(f"rank killed after {killed_at}; resumed from {resumed.group(1)}; vs uninterrupted: max |dw| = {worst:.2e}")


@pytest.mark.chaos  # a fault injected into a flow run: `make test-chaos` (CI runs it after `make test`)
def test_a_stage_that_refuses_its_input_is_not_retried(ray_head, tiny_base, tmp_path):
    """A job whose CLI exits 2 (bad data only the job can see: a dataset file with a malformed
    row) fails the task at once with the CLI's one-line reason; retrying would only fail the same way."""
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"input": "a", "output": "b"}\nnot json\n')
    t0 = time.monotonic()
    with pytest.raises(Exception, match=r"the stage refused its input: .*error: .*broken\.jsonl:2"):
        run_flow(
            run_name="refused",
            store=str(tmp_path / "store"),
            ray_address=ray_head,
            sft={
                **QUICK,
                "pretrain": str(tiny_base),
                "dataset": str(broken),
                "input_key": "input",
                "output_key": "output",
                "apply_chat_template": False,
                "multiturn": False,
            },
            retries=2,
        )
    jobs = [j for j in ray_jobs(ray_head, "refused") if j.metadata["alignflow_stage"] == "sft"]
    assert [j.status.value for j in jobs] == ["FAILED"]  # one job: no retries
    print(f"refused input: failed once, after {time.monotonic() - t0:.1f}s")


@pytest.mark.parametrize(
    "params, error, needle",
    [
        ({"ray_address": "http://127.0.0.1:{closed}"}, RayClusterError, "is unreachable"),
        ({"store": "ftp://host/x"}, ConfigError, "unsupported scheme 'ftp'"),
        ({"sft": {"train_batch_size": 0}}, ConfigError, "--train_batch_size 0: must be > 0"),
        ({"sft": {"dataset": "/nowhere/data.jsonl"}}, ConfigError, "--dataset /nowhere/data.jsonl: does not exist"),
        (
            {"sft": {"packing_samples": "maybe"}},
            ConfigError,
            "sft: flow parameter sft: --packing_samples 'maybe': expected true or false",
        ),
        ({"sft": {"max_stepz": 3}}, ConfigError, r"sft.max_stepz: unknown option \(did you mean sft.max_steps\?\)"),
        ({"retries": -1}, ConfigError, "retries=-1: must be >= 0"),
        ({"sft": {"use_wandb": "0123456789abcdef-planted-wandb-key"}}, ConfigError, "keys never go in flow parameters"),
    ],
)
def test_bad_parameters_fail_before_anything_runs(params, error, needle, tmp_path):
    params = {k: (v.format(closed=free_port()) if isinstance(v, str) else v) for k, v in params.items()}
    params.setdefault("store", str(tmp_path / "store"))
    t0 = time.monotonic()
    with pytest.raises(error, match=needle) as e:
        run_flow(run_name="bad", **params)
    assert "\n" not in str(e.value)
    assert not any((tmp_path / "store").rglob("MANIFEST.json"))
    key = (params.get("sft") or {}).get("use_wandb")
    if key:  # refused before Prefect created a flow run: the key is in none of its files
        home = Path(os.environ["PREFECT_HOME"])
        assert not [p for p in home.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    print(f"{needle}: failed after {time.monotonic() - t0:.1f}s")


def test_unreachable_store_endpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", PLANTED_SECRET)
    monkeypatch.setenv("ALIGNFLOW_STORE_RETRIES", "2")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    with pytest.raises(StorageError, match=r"s3://alignflow-test/x.*check that the store is reachable") as e:
        run_flow(run_name="bad", store="s3://alignflow-test/x")
    assert PLANTED_SECRET not in str(e.value)


def test_bad_credentials(tmp_path, monkeypatch):
    """A second moto_server that checks credentials: a wrong key is refused with a clear error."""
    import subprocess
    import sys
    import urllib.request

    port = free_port()
    exe = str(Path(sys.executable).parent / "moto_server")
    env = {**__import__("os").environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    proc = subprocess.Popen(
        [exe, "-H", "127.0.0.1", "-p", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}", timeout=1)
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                time.sleep(0.1)
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG1")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", PLANTED_SECRET)
        with pytest.raises(StorageError, match=r"s3://alignflow-test/x") as e:
            run_flow(run_name="bad", store="s3://alignflow-test/x")
        message = str(e.value)
        assert PLANTED_SECRET not in message and (
            "InvalidAccessKeyId" in message or "403" in message or "denied" in message.lower()
        )
    finally:
        stop_process(proc)


def test_embedded_ray_head_is_started_and_stopped(tiny_base, tmp_path, monkeypatch):
    """No ray_address: the flow starts its own head on loopback and stops every process of it. Its processes are
    told from the other tests' (the session's head, the other worker's) by the head its watchdog names: its temp
    dir and GCS port, and their children (alignflow/tasks/cluster/head_watchdog.py), gathered while the flow runs.
    This worker's session head (`ray_head`, when an earlier test started it) has a watchdog of this process too:
    the one that was there before the flow is not the flow's."""
    import psutil

    from alignflow.tasks.cluster.head_watchdog import head_processes
    from tests.test_interrupts import watchdogs_of

    seen: dict[int, psutil.Process] = {}
    done = threading.Event()
    session = {dog.pid for dog in watchdogs_of(os.getpid())}
    sft = {**QUICK, "pretrain": str(tiny_base)}  # one job, the SFT stage's (a tiny_base stage is one more)

    def gather() -> None:  # every process of the embedded head, as it starts them
        while not done.is_set():
            for dog in [d for d in watchdogs_of(os.getpid()) if d.pid not in session]:
                try:
                    head = head_processes(Path(dog.cmdline()[-2]), int(dog.cmdline()[-1]))
                except psutil.NoSuchProcess:  # already stopped
                    continue
                seen.update({dog.pid: dog, **{p.pid: p for p in head}})
            time.sleep(0.2)

    watcher = threading.Thread(target=gather, daemon=True)
    watcher.start()
    try:
        result, _ = run_flow(run_name="embedded", store=str(tmp_path / "store"), sft=sft)
    finally:
        done.set()
        watcher.join(timeout=30)
    assert storage.is_committed(result["model_uri"])
    assert len(seen) >= 4, seen  # the watchdog, the head's daemons, the job's driver and rank
    time.sleep(1)
    alive = [p for p in seen.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, [(p.pid, p.cmdline()[:3]) for p in alive]
    # run again: every stage is committed, so no Ray head is started at all
    from alignflow.tasks.cluster import ray_cluster

    started = []

    def recording_head(*args, **kwargs):
        started.append(args)
        return real_head(*args, **kwargs)

    real_head = ray_cluster.local_head
    monkeypatch.setattr(ray_cluster, "local_head", recording_head)
    t0 = time.monotonic()
    again, run_id = run_flow(run_name="embedded", store=str(tmp_path / "store"), sft=sft)
    assert again["skipped"] and again["model_uri"] == result["model_uri"] and not started
    assert "already committed" in flow_logs(run_id)
    print(f"all-committed rerun: {time.monotonic() - t0:.1f}s, no Ray head")


def test_cancelled_flow_stops_its_ray_job(ray_head, tiny_base, tmp_path):
    """Cancelling the flow (as Prefect does, by cancelling the coroutine) stops the running job."""
    from ray.job_submission import JobSubmissionClient

    async def scenario():
        flow = asyncio.ensure_future(
            sft_flow(
                run_name="cancel",
                recipe="tiny",
                store=str(tmp_path / "store"),
                ray_address=ray_head,
                sft={"pretrain": str(tiny_base), "max_steps": 2000, "eval_dataset": None},
            )
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            running = [
                j
                for j in ray_jobs(ray_head, "cancel")
                if j.metadata.get("alignflow_stage") == "sft" and j.status.value == "RUNNING"
            ]
            if running:
                break
            await asyncio.sleep(0.5)
        assert running, "the sft job never started"
        flow.cancel()
        with pytest.raises(BaseException):
            await flow
        return running[0].submission_id

    sid = asyncio.run(scenario())
    client = JobSubmissionClient(ray_head)
    deadline = time.monotonic() + 60
    while client.get_job_status(sid).value != "STOPPED" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert client.get_job_status(sid).value == "STOPPED"
