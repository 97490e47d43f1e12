"""The deployments against a real Prefect server (`prefect server start`) and process worker,
started once for this module: `prefect deployment run` of sft/tiny (its artifacts checked through
the API and in a real browser), of sft-grpo/tiny-vision (its pictures), and
of sft-rm-ppo/tiny with a stage override, `prefect flow-run retry` of a pipeline whose PPO job was killed, and
iterative-dpo/nightly served on a short interval schedule."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alignment import storage
from tests.browser import chromium, open_flow_run_artifact
from tests.conftest import REPO
from tests.fixtures_s3 import stop_process
from tests.prefect_server import SERVE_NIGHTLY, deployed_server, start_worker_ignoring_sigint, wait_terminal

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def prefect(module_tmp, ray_head):
    # after ray_head: the worker's (and a served flow's) environment then holds the session cluster's
    # token (RAY_AUTH_MODE/RAY_AUTH_TOKEN), as a real worker's would; before it, they could not reach it
    with deployed_server(module_tmp) as p:
        yield p


def test_deploy_asked_nothing_and_the_nightly_runs_one_at_a_time(prefect):
    """scripts/deploy.sh ran with stdin closed (the fixture); the nightly deployment has a
    concurrency limit of 1 that queues a second run; a worker without PREFECT_API_URL refuses."""
    nightly = prefect.deployment("iterative-dpo/nightly")
    assert nightly.global_concurrency_limit.limit == 1
    assert nightly.concurrency_options.collision_strategy.value == "ENQUEUE"
    # a wandb key as a parameter: refused by the server's parameter validation, so no flow run holds it
    key = "0123456789abcdef-planted-wandb-key"
    refused = prefect.cli("deployment", "run", "sft/tiny", "--param", json.dumps({"use_wandb": key}).join(["sft=", ""]))
    assert refused.returncode != 0 and "use_wandb" in refused.stdout + refused.stderr, refused.stdout[-2000:]
    # neither the server's database (PREFECT_HOME) nor its or the worker's log has it
    assert not [p for p in Path(prefect.logs).rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    bare = subprocess.run(
        ["bash", "scripts/worker.sh"],
        env={k: v for k, v in prefect.env.items() if k != "PREFECT_API_URL"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = [ln for ln in bare.stderr.splitlines() if ln.strip()]
    assert bare.returncode == 2 and len(lines) == 1 and "PREFECT_API_URL is not set" in lines[0], bare.stderr


def test_worker_script_stops_on_sigterm_where_sigint_is_ignored(prefect):
    """`scripts/worker.sh &` in a script, nohup and some supervisors start it with SIGINT ignored;
    Prefect's worker answers SIGTERM with a SIGINT to itself, which then did nothing until SIGKILL.
    One SIGTERM stops it. Its own work queue, so it never picks up another test's flow run."""
    log = Path(prefect.logs) / "worker-sigterm.log"
    worker = start_worker_ignoring_sigint(prefect, log, "--work-queue", "sigterm-test")
    try:
        assert "started" in log.read_text(), log.read_text()[-2000:]
        t0 = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0 and time.monotonic() - t0 < 30, log.read_text()[-2000:]
        assert "stopped" in log.read_text(), log.read_text()[-2000:]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_deployment_run_publishes_progress_curves_and_report_seen_in_a_browser(prefect, ray_head, tmp_path):
    """`prefect deployment run sft/tiny`: the stage's progress artifact reaches 100 %, its curve
    artifact is redrawn while it runs and once more at the end, the model artifact shows the store
    path as text (no link a browser resolves against the UI's host), and the flow run's report
    renders in Chromium: table rows and a non-empty curve image."""
    chromium()  # before the run: a missing browser fails (CI) or skips (elsewhere) at once
    sft = json.dumps({"max_steps": 8, "eval_dataset": None, "save_steps": 4, "logging_steps": 1})
    run = prefect.cli(
        "deployment",
        "run",
        "sft/tiny",
        "--param",
        f"ray_address={ray_head}",
        "--param",
        f"store={tmp_path / 'store'}",
        "--param",
        f"sft={sft}",
        "--watch",
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:] + prefect.worker_log()[-3000:]
    assert "Completed" in run.stdout
    run_id = re.search(r"UUID:\s*([0-9a-f-]{36})", run.stdout).group(1)
    assert list((tmp_path / "store" / "tiny").glob("sft-*/model/MANIFEST.json"))
    listed = prefect.cli("artifact", "ls")
    assert listed.returncode == 0, listed.stderr

    by_key: dict[str, list] = {}
    for a in prefect.artifacts(run_id):
        by_key.setdefault(a.key, []).append(a)
    for key in ("tiny-sft-progress", "tiny-sft-model", "tiny-sft-metrics", "tiny-sft-curve", "tiny-sft-report"):
        assert key in by_key and key in listed.stdout, (key, sorted(by_key))
    progress = by_key["tiny-sft-progress"][-1]
    assert progress.data == 100 and progress.updated > progress.created
    drawn = [a.data for a in by_key["tiny-sft-curve"]]
    assert any("Live: step" in d for d in drawn[:-1]) and "Series: train/loss" in drawn[-1], [d[-120:] for d in drawn]
    model = by_key["tiny-sft-model"][-1].data
    stored = next((tmp_path / "store" / "tiny").glob("sft-*/model"))
    assert f"Store URI: `{stored}`" in model and f"from_pretrained('{stored}')" in model and "](/" not in model
    assert f"tensorboard: `{stored}/tensorboard`" in model and list((stored / "tensorboard").glob("events.*"))

    shots = os.environ.get("ALIGNFLOW_SCREENSHOTS")
    report = open_flow_run_artifact(prefect.ui, run_id, "tiny-sft-report", Path(shots) if shots else None)
    assert "/artifacts/artifact/" in report.url
    assert report.images and all(width > 100 for width in report.images), report.images
    assert any(row.startswith("sft\t") and "loss" in row for row in report.rows), report.rows
    assert "data:image/png" not in report.text  # the picture shows, not its URL


# make test-extended: CI trains on pictures in tests/test_vision.py and runs OpenRLHF's VLM line on a vLLM engine
# (tests/test_openrlhf_v011.py); a deployment's artifacts are the browser test's above
@pytest.mark.extended
def test_tiny_vision_deployment_shows_pictures(prefect, ray_head, tmp_path):
    """`prefect deployment run 'sft-grpo/tiny-vision'` on the server and worker: the tiny LLaVA made, SFT and
    GRPO on its pictures (the image encoder trained too: grpo.yaml says why; freezing is the VLM line's test),
    both models evaluated on the held-out pictures, a handful of those shown with both answers as an artifact.
    (A rerun that skips committed stages: the flow-run retry below.) Budgets are a few steps: learning is measured
    in benchmarks (docs/learning-vision.md), not here."""
    import torch
    from safetensors.torch import load_file

    from tests.flow_runs import ray_jobs

    store = tmp_path / "store"
    grpo = {"max_samples": 8, "rollout_batch_size": 4, "n_samples_per_prompt": 4, "train_batch_size": 16}
    grpo |= {"micro_rollout_batch_size": 16, "micro_train_batch_size": 8, "generate_max_len": 8}
    grpo |= {"dynamic_filtering": False, "save_steps": -1}
    params = {"ray_address": ray_head, "store": str(store), "run_name": "vision", "sft": {"max_steps": 4}, "grpo": grpo}
    args = [f"--param={k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in params.items()]
    run = prefect.cli("deployment", "run", "sft-grpo/tiny-vision", *args, "--watch", timeout=900)
    assert run.returncode == 0 and "Completed" in run.stdout, run.stdout[-2000:] + prefect.worker_log()[-3000:]
    jobs = [j for j in ray_jobs(ray_head, "vision") if j.metadata.get("alignflow_output", "").startswith(str(store))]
    stages = sorted(j.metadata["alignflow_stage"] for j in jobs)
    assert stages == ["evaluate", "evaluate", "ppo", "sft", "tiny_base"], stages
    assert all(j.status.value == "SUCCEEDED" for j in jobs)

    model = {j.metadata["alignflow_stage"]: f"{j.metadata['alignflow_output']}/model" for j in jobs}
    before, after = (load_file(storage.file_in(model[s], "model.safetensors")) for s in ("sft", "ppo"))
    encoder = [k for k in before if "language_model" not in k and "lm_head" not in k]
    assert encoder and any(not torch.equal(before[k], after[k]) for k in encoder)
    assert any(not torch.equal(before[k], after[k]) for k in before if "language_model" in k)
    first = re.search(r"UUID:\s*([0-9a-f-]{36})", run.stdout).group(1)
    table = [a.data for a in prefect.artifacts(first) if a.key == "vision-heldout-pictures"][-1]
    assert table.count("](data:image/png;base64,") == 8 and "| after sft | after grpo |" in table


@pytest.mark.chaos  # a fault injected into a deployment's flow run: `make test-chaos` (CI runs it with the suite)
def test_pipeline_override_and_flow_run_retry_resume_ppo(prefect, ray_head, tmp_path):
    """`prefect deployment run sft-rm-ppo/tiny --param ppo=…` (no task retries); the PPO job is
    killed after a committed checkpoint, so the flow run fails; `prefect flow-run retry` runs it
    again: SFT is skipped (committed), PPO resumes from its checkpoint, and the overridden
    hyper-parameter shows in the PPO manifest. The PPO stage's curve artifact draws its reward and KL.
    PPO's reward is the tiny world's reward function, so the flow trains no RM: this test is about the retry (an
    RM stage in a flow: tests/test_sft_dpo_flow.py; an RM that loads with plain transformers:
    tests/test_preference_integration.py; a flow's stage on 2 ranks placed on the cluster: tests/test_ray_ranks.py)."""
    from ray.job_submission import JobSubmissionClient

    from tests.flow_runs import ray_jobs, stop_ppo_after_a_checkpoint

    store = tmp_path / "store"
    params = {
        "sft": {"max_steps": 12, "save_steps": 6, "eval_dataset": None, "logging_steps": 3},
        "ppo": {
            "remote_rm_url": "data/tiny/reward_func.py",
            "max_samples": 16,
            "num_episodes": 4,
            "n_samples_per_prompt": 2,  # 4 iterations of 16 prompts x 2 samples, one optimizer step each
            "train_batch_size": 32,
            "save_steps": 1,
            "actor_learning_rate": 3e-5,
            "init_kl_coef": 0.01,
            "dynamic_filtering": False,  # the recipe's refills: its learning budget, not this test's
        },
    }
    args = [f"--param={k}={json.dumps(v)}" for k, v in params.items()]
    run = prefect.cli(
        "deployment",
        "run",
        "sft-rm-ppo/tiny",
        "--param",
        f"ray_address={ray_head}",
        "--param",
        f"store={store}",
        "--param",
        "retries=0",
        "--param",
        "heldout_eval=false",
        *args,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    run_id = re.search(r"UUID:\s*([0-9a-f-]{36})", run.stdout).group(1)

    client = JobSubmissionClient(ray_head)
    killed_at = stop_ppo_after_a_checkpoint(ray_head, "tiny", str(store))  # SIGTERM to the PPO driver, mid-stage
    assert killed_at is not None, "the PPO job was not caught mid-stage:\n" + prefect.worker_log()[-3000:]
    assert wait_terminal(prefect, run_id) == "FAILED"

    retried = prefect.cli("flow-run", "retry", run_id)
    assert retried.returncode == 0, retried.stdout[-2000:] + retried.stderr[-2000:]
    assert wait_terminal(prefect, run_id) == "COMPLETED", prefect.worker_log()[-4000:]

    jobs = [j for j in ray_jobs(ray_head, "tiny") if j.metadata.get("alignflow_output", "").startswith(str(store))]
    by_stage = {s: [j.status.value for j in jobs if j.metadata["alignflow_stage"] == s] for s in ("sft", "rm", "ppo")}
    assert by_stage == {"sft": ["SUCCEEDED"], "rm": [], "ppo": ["STOPPED", "SUCCEEDED"]}, by_stage
    resumed = [j for j in jobs if j.metadata["alignflow_stage"] == "ppo"][-1]
    assert "-f2-" in resumed.submission_id  # the flow run's second run
    done = int(killed_at.rstrip("/").rsplit("global_step", 1)[1])
    log = client.get_job_logs(resumed.submission_id)
    assert f"resuming PPO from {killed_at}" in log and f"ran iterations {done + 1}..4 of 4" in log, log[-3000:]
    manifest = storage.read_manifest(f"{resumed.metadata['alignflow_output']}/model")
    assert manifest["metadata"]["config"]["actor_learning_rate"] == 3e-5
    assert list((Path(resumed.metadata["alignflow_output"]) / "model" / "tensorboard").glob("events.*"))
    curve = [a.data for a in prefect.artifacts(run_id) if a.key == "tiny-ppo-curve"][-1]
    assert "train/reward" in curve and "train/kl" in curve, curve[-300:]
    # lineage: the PPO model's card (parsed by huggingface_hub) names its parent and data fingerprint, and
    # the chain walks back PPO -> SFT -> the tiny base
    from huggingface_hub import ModelCard

    from alignment.lineage import walk

    ppo_model = f"{resumed.metadata['alignflow_output']}/model"
    facts = ModelCard.load(Path(ppo_model) / "README.md").data.to_dict()["alignflow"]
    sft_model = f"{next(j for j in jobs if j.metadata['alignflow_stage'] == 'sft').metadata['alignflow_output']}/model"
    assert facts["parents"]["pretrain"] == sft_model and facts["data_fingerprints"]["prompt_data"]
    assert [hop.stage for hop in walk(ppo_model)] == ["ppo", "sft", "tiny_base"]
    print(
        f"PPO job killed after {killed_at.rsplit('/', 1)[1]}; `prefect flow-run retry` skipped SFT and "
        f"resumed PPO at iteration {done + 1}"
    )


# make test-extended: CI proves the nightly's concurrency limit above and rounds continuing across flow runs in
# tests/test_gates_and_compare.py
@pytest.mark.extended
def test_nightly_iterative_dpo_on_a_schedule_continues_from_the_last_round(prefect, ray_head, tiny_sft, tmp_path):
    """iterative-dpo/nightly served (`flow.serve`) with a 20 s interval instead of its nightly cron:
    two scheduled runs execute, one round each, the second from the first's committed policy."""
    from alignflow.tasks.orchestration.policy_pointer import read_pointer

    store = str(tmp_path / "store")
    served = subprocess.Popen(
        [sys.executable, "-c", SERVE_NIGHTLY, store, ray_head, str(tiny_sft)],
        env=prefect.env,
        cwd=REPO,
        stdout=open(tmp_path / "serve.log", "w"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 900
        pointer = None
        while time.monotonic() < deadline and served.poll() is None:
            pointer = read_pointer(store, "served")
            if pointer is not None and pointer.round >= 2:
                break
            time.sleep(2)
    finally:
        stop_process(served, signal.SIGINT)
    log = (tmp_path / "serve.log").read_text()
    assert pointer is not None and pointer.round >= 2, log[-4000:]
    first, second = pointer.history[:2]
    assert first["policy_in"] == str(tiny_sft) and second["policy_in"] == first["model_uri"]
    lineage = storage.read_manifest(second["model_uri"])["metadata"]["config"]
    assert lineage["pretrain"] == first["model_uri"] and lineage["dataset"] == second["data"]
    listed = prefect.cli("flow-run", "ls", "--flow-name", "iterative-dpo", "--state-type", "COMPLETED", "-o", "json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert len([r for r in json.loads(listed.stdout) if r["parameters"].get("run_name") == "served"]) >= 2
    # what a round does to held-out accuracy is the gate's to decide (tests/test_gates_and_compare.py) and the
    # learning benchmark's to measure, not this test's: it is about the schedule
