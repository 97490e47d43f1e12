"""An SFT stage through the flow on the S3 store (the session's real S3-compatible server): committed, skipped on
rerun, two flow runs asking for one new output at once run it once, and the planted secrets are in no log,
manifest, artifact, job metadata or file."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import pytest

from alignflow.flows.sft import sft_flow
from alignment import storage
from tests.fixtures_s3 import PLANTED_SECRET, PLANTED_WANDB_KEY
from tests.flow_runs import QUICK, flow_logs, ray_jobs, run_flow

pytestmark = pytest.mark.integration


def test_sft_on_s3_skip_rerun_and_no_secret_leaks(ray_head, s3_root, tmp_path):
    from transformers import AutoModelForCausalLM

    # wandb on (offline): its key is in the Ray cluster's environment (the ray_head fixture), never a parameter
    first, run_id = run_flow(run_name="s3run", store=s3_root, ray_address=ray_head, sft={**QUICK, "use_wandb": "env"})
    model_uri = first["model_uri"]
    assert not first["skipped"] and model_uri.startswith(s3_root)
    assert storage.is_committed(model_uri)
    stage_dir = model_uri.rsplit("/", 1)[0]
    assert storage.list_committed(f"{stage_dir}/checkpoints") == ["global_step3", "global_step6"]
    # the job ran from the resolved config the task wrote beside its output
    assert f"save_path: {model_uri}\n" in storage.read_text(f"{stage_dir}/config.yaml")
    model = AutoModelForCausalLM.from_pretrained(storage.download_dir(model_uri, tmp_path / "m"))
    assert model.config.model_type == "llama"

    t0 = time.monotonic()
    again, _ = run_flow(run_name="s3run", store=s3_root, ray_address=ray_head, sft={**QUICK, "use_wandb": "env"})
    skip_s = time.monotonic() - t0
    assert again["skipped"] and again["model_uri"] == model_uri
    print(f"second run with the same parameters: skipped in {skip_s:.1f}s of flow time")

    # a changed config is a new output; two flow runs asking for it at once queue on its concurrency limit
    # (alignflow/tasks/orchestration/output_slot.py): one runs the job, the other waits, then finds it committed
    async def twice():
        params = dict(
            recipe="tiny",
            run_name="s3run",
            store=s3_root,
            ray_address=ray_head,
            sft={**QUICK, "use_wandb": "env", "learning_rate": 1e-3},
        )
        return await asyncio.gather(sft_flow(**params), sft_flow(**params))

    pair = asyncio.run(twice())
    assert sorted(r["skipped"] for r in pair) == [False, True], pair
    changed = next(r for r in pair if not r["skipped"])
    assert changed["model_uri"] != model_uri and pair[0]["model_uri"] == pair[1]["model_uri"]
    out = changed["model_uri"].rsplit("/", 1)[0]
    assert len([j for j in ray_jobs(ray_head, "s3run") if j.metadata.get("alignflow_output") == out]) == 1

    # the planted secret key is nowhere: flow logs, manifests, artifacts, Ray job metadata
    logs = flow_logs(run_id)
    assert "submitted Ray job" in logs and PLANTED_SECRET not in logs
    assert PLANTED_SECRET not in json.dumps(storage.read_manifest(model_uri))
    for job in ray_jobs(ray_head, "s3run"):
        assert PLANTED_SECRET not in json.dumps([job.entrypoint, job.metadata, job.runtime_env], default=str)
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async def artifacts():  # this run's (the session's API holds other tests' too, more than one page)
        async with get_client() as client:
            return await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_="s3run-")))

    found = asyncio.run(artifacts())
    keys = {a.key for a in found}
    assert {"s3run-sft-model", "s3run-sft-metrics", "s3run-sft-curve"} <= keys
    assert PLANTED_SECRET not in json.dumps([a.data for a in found], default=str)
    # and in no file: every object in the store, wandb's run files, Prefect's database, Ray's session logs
    # the stage's offline wandb run is kept in the store beside its model (the card names that copy)
    wandb_uri = storage.read_manifest(model_uri)["metadata"]["tracking"]["wandb"]
    assert wandb_uri.startswith(f"{model_uri.rsplit('/', 1)[0]}/wandb/offline-run-") and storage.is_committed(wandb_uri)
    fs, root = storage.filesystem(s3_root)
    places = {
        "store": [(p, fs.cat_file(p)) for p in fs.find(root)],
        "prefect": _files(Path(os.environ["PREFECT_HOME"])),
        "ray": [f for d in Path(tempfile.gettempdir()).glob("alignflow-ray-*") for f in _files(d)],
    }
    wandb_files = [p for p, _ in places["store"] if "/wandb/offline-run-" in p]
    assert len(places["store"]) > 10 and wandb_files and places["ray"], {k: len(v) for k, v in places.items()}
    for secret in (PLANTED_SECRET, PLANTED_WANDB_KEY):
        hits = [str(p) for files in places.values() for p, data in files if secret.encode() in data]
        assert not hits, (secret, hits)
    print({k: len(v) for k, v in places.items()}, "files searched: no planted secret")


def _files(root: Path) -> list[tuple[Path, bytes]]:
    out = []
    for p in root.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink():
                out.append((p, p.read_bytes()))
        except OSError:  # a file of a running process that went away meanwhile
            continue
    return out
