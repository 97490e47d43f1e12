"""Who uses the CPU while a stage trains: the demo's SFT stage run bare and through the `sft` flow
(Prefect's ephemeral API, a local Ray head, the Ray job), every process's CPU time sampled each
second, counted over the training window (the first checkpoint commit to the last, so start-up and
the final commit are left out).

    .venv/bin/python benchmarks/cpu_share.py --steps 1200            # bare, then through the flow
    .venv/bin/python benchmarks/cpu_share.py --steps 600 --side flow

Prints per side: the window, the trainer's share of a core and its CPU seconds per 1,000 steps
(work inflated by waiting shows here), and the other processes that used the most. Figures:
docs/benchmarks.md ("Where the time goes").
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
HZ = os.sysconf("SC_CLK_TCK")
COMMIT = re.compile(
    r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \[rank0\] INFO alignment\.trainers\.checkpoint: "
    r"checkpoint committed: \S*global_step(\d+)"
)


class Sampler(threading.Thread):
    """Every process's CPU ticks once a second: [(unix time, {pid: ticks})], and each pid's command."""

    def __init__(self):
        super().__init__(daemon=True)
        self.snaps: list[tuple[float, dict[int, int]]] = []
        self.names: dict[int, str] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            ticks = {}
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                try:
                    fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
                    ticks[int(entry.name)] = int(fields[11]) + int(fields[12])  # utime + stime
                    if int(entry.name) not in self.names:
                        self.names[int(entry.name)] = Path(entry.path, "cmdline").read_text().replace("\0", " ")[:100]
                except (OSError, IndexError):  # the process ended between listing and reading
                    continue
            self.snaps.append((time.time(), ticks))
            self.stop.wait(1.0)

    def between(self, t0: float, t1: float) -> tuple[float, list[tuple[float, int]]]:
        a = min(self.snaps, key=lambda s: abs(s[0] - t0))
        b = min(self.snaps, key=lambda s: abs(s[0] - t1))
        used = sorted(((b[1][p] - a[1].get(p, 0)) / HZ, p) for p in b[1])
        return b[0] - a[0], used[::-1]


def window(log: str) -> tuple[float, float, int]:
    """Unix times of the first and last checkpoint commits in the log, and the steps between them."""
    found = [(dt.datetime.strptime(t, "%Y-%m-%d %H:%M:%S,%f").timestamp(), int(s)) for t, s in COMMIT.findall(log)]
    if len(found) < 2:
        raise RuntimeError(f"fewer than two checkpoint commits in the run's log ({len(found)} found)")
    return found[0][0], found[-1][0], found[-1][1] - found[0][1]


def run_side(side: str, base: Path, work: Path, steps: int) -> None:
    from benchmarks.compare.workloads import DEMO_SFT_CONFIG, FLOW_SCRIPT, base_env

    out = work / side
    shutil.rmtree(out, ignore_errors=True)
    if side == "bare":
        cmd = [
            sys.executable,
            "-m",
            "alignment.cli.train_sft",
            "--config",
            str(DEMO_SFT_CONFIG),
            "--pretrain",
            str(base),
            "--max_steps",
            str(steps),
            "--save_path",
            f"{out}/model",
            "--ckpt_path",
            f"{out}/checkpoints",
        ]
    else:
        cmd = [
            sys.executable,
            "-c",
            FLOW_SCRIPT,
            f"cpu-share-{int(time.time())}",
            str(out),
            json.dumps({"pretrain": str(base), "max_steps": steps}),
        ]
    # trl_compare's environment (2 threads, offline hubs, no PREFECT_API_URL: the ephemeral API)
    env = {**base_env(2, work), "PREFECT_HOME": str(work / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    sampler = Sampler()
    sampler.start()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    sampler.stop.set()
    sampler.join()
    (work / f"{side}.log").write_text(done.stdout + done.stderr)
    if done.returncode:
        raise SystemExit(f"{side} failed (exit {done.returncode}); see {work / f'{side}.log'}")
    t0, t1, n = window(done.stdout + done.stderr)
    wall, used = sampler.between(t0, t1)
    trainer_s, rest = used[0][0], [u for u in used[1:] if u[0] >= 0.05]  # the trainer uses the most
    others = sum(s for s, _ in rest)
    print(
        f"{side}: window {wall:.1f} s for {n} steps ({1000 * wall / n:.1f} s per 1,000); "
        f"trainer {100 * trainer_s / wall:.1f} % "
        f"of a core, {1000 * trainer_s / n:.1f} CPU-s per 1,000 steps; others {others:.1f} CPU-s "
        f"({100 * others / wall / os.cpu_count():.1f} % of {os.cpu_count()} cores)"
    )
    for s, pid in rest[:8]:
        print(f"    {s:6.2f} CPU-s  {sampler.names.get(pid, '?')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1200, help="SFT steps (the demo's 1200; checkpoints every 200)")
    ap.add_argument("--side", choices=("bare", "flow", "both"), default="both")
    ap.add_argument("--work", type=Path, default=Path("runs/cpu_share"))
    args = ap.parse_args()
    if args.steps < 400:  # the window runs from the first checkpoint commit (step 200) to the last
        print(f"error: --steps {args.steps}: give at least 400 (checkpoints come every 200 steps)", file=sys.stderr)
        raise SystemExit(2)
    from alignment.tiny_world.base_model import make_base

    work = args.work.resolve()
    base = work / "base"
    if not (base / "config.json").exists():
        make_base(base, seed=0)
    for side in ("bare", "flow") if args.side == "both" else (args.side,):
        run_side(side, base, work, args.steps)


if __name__ == "__main__":
    main()
