"""The kill -9 matrix's killer (tests/test_chaos_kills.py): a thread that watches a run's Ray jobs and SIGKILLs
each stage attempt's training process at the planned point, what it saw when it did, and the check of every
resume against it."""

from __future__ import annotations

import glob
import os
import random
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from alignment import storage
from tests.flow_runs import ray_jobs

EVENT = re.compile(r"@alignflow \{\"step\":(\d+),\"total\":(\d+)")
RANK_LINE = re.compile(r"pid=(\d+)[^)]*\) rank 0 of \d+ on Ray node")


@dataclass
class Kill:
    stage: str
    kind: str
    sid: str
    pid: int
    at_s: float  # seconds after the chaos flows started
    start: int  # the step the attempt started from (its resume point)
    step: int = 0  # last step the killed process reported
    saving: str | None = None  # the checkpoint dir being written when the process died
    committed: list[str] = field(default_factory=list)  # committed checkpoints once it was dead
    uncommitted: list[str] = field(default_factory=list)  # dirs without MANIFEST.json then
    resumed: str | None = None  # what the next attempt loaded
    lost: int = 0


def ray_log_dirs() -> list[str]:
    return glob.glob(os.path.join(tempfile.gettempdir(), "alignflow-ray-*", "session_latest", "logs"))


def driver_log(sid: str) -> Path | None:
    for d in ray_log_dirs():
        p = Path(d) / f"job-driver-{sid}.log"
        if p.exists():
            return p
    return None


def read(log: Path) -> str:
    try:
        return log.read_text(errors="replace")
    except OSError:
        return ""


def last_step(log: Path) -> int | None:
    steps = EVENT.findall(read(log))
    return int(steps[-1][0]) if steps else None


def step_of(name: str | None) -> int:
    return int(name.rstrip("/").rsplit("global_step", 1)[1]) if name else 0


def ckpt_dirs(ckpt: str) -> tuple[list[str], list[str]]:
    names = (
        sorted((n for n in os.listdir(ckpt) if n.startswith("global_step")), key=step_of) if os.path.isdir(ckpt) else []
    )
    committed = storage.list_committed(ckpt)
    return committed, [n for n in names if n not in committed]


class Killer(threading.Thread):
    """Watches the jobs of one run; SIGKILLs the training process of each stage attempt the plan names."""

    def __init__(
        self,
        address: str,
        run_name: str,
        plan: dict[str, list[str]],
        save: dict[str, int],
        rng: random.Random,
        t0: float,
    ):
        super().__init__(daemon=True)
        self.address, self.run_name, self.plan, self.rng, self.t0 = address, run_name, plan, rng, t0
        self.save = save  # each stage's checkpoint interval
        self.kills: list[Kill] = []
        self.missed: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        from ray.job_submission import JobSubmissionClient

        client, seen = JobSubmissionClient(self.address), set()
        while not self.stop.is_set() and any(self.plan.values()):
            for job in ray_jobs(self.address, self.run_name):
                stage = job.metadata.get("alignflow_stage")
                if job.submission_id in seen or not self.plan.get(stage) or job.status.value != "RUNNING":
                    continue
                seen.add(job.submission_id)
                kind = self.plan[stage].pop(0)
                try:
                    kill = self.attack(client, job, stage, kind)
                except Exception as e:  # noqa: BLE001 - reported as a miss, asserted on below
                    import traceback

                    kill = None
                    self.missed.append(f"{stage}/{kind}: {e!r} {traceback.format_exc()[-600:]}")
                if kill is not None:
                    self.kills.append(kill)
            time.sleep(0.25)

    def attack(self, client, job, stage: str, kind: str) -> Kill | None:
        import psutil

        sid, out = job.submission_id, job.metadata["alignflow_output"]
        ckpt = f"{out}/checkpoints"
        start = step_of(storage.get_latest(ckpt))  # what this attempt resumes from
        deadline = time.monotonic() + 120
        proc = log = None
        while proc is None and time.monotonic() < deadline:  # the training process; its lines reach the job log
            log = driver_log(sid)
            if log is None:
                time.sleep(0.05)
                continue
            if stage == "ppo":  # the driver: `python -m alignment.cli.train_ppo_ray --config <out>/config.yaml`
                for p in psutil.process_iter(["cmdline"]):
                    cmd = p.info["cmdline"] or []
                    if "alignment.cli.train_ppo_ray" in cmd and f"{out}/config.yaml" in cmd:
                        proc = p
            else:
                m = RANK_LINE.search(read(log))
                proc = psutil.Process(int(m.group(1))) if m else None
            time.sleep(0.05)
        if proc is None:
            self.missed.append(f"{stage}/{kind}: no training process found for {sid}")
            return None
        saving = None
        if kind == "start":  # a random moment of start-up / checkpoint loading, before any step
            # at the latest when this attempt logs its first step: a retry resuming near the end may
            # finish in less than the drawn delay (seen on a loaded core: "ended before the kill")
            until = time.monotonic() + self.rng.uniform(0.5, 4.0)
            while time.monotonic() < until and proc.is_running() and (last_step(log) or 0) <= start:
                time.sleep(0.02)
        elif kind == "step":
            while (total := self._total(log, proc)) is None:
                time.sleep(0.02)
            target = start + self.rng.randint(1, max(1, total - start - 2))
            while proc.is_running() and (last_step(log) or 0) < target:
                time.sleep(0.02)
        else:  # "save": the moment a new checkpoint dir appears (no MANIFEST.json yet)
            every, existing = self.save[stage], ckpt_dirs(ckpt)
            newest = max([start, *(step_of(n) for n in existing[0] + existing[1])])
            k = (newest // every + 1 + self.rng.randint(0, 1)) * every
            polls = 0
            while proc.is_running() and not os.path.isdir(f"{ckpt}/global_step{k}"):
                polls += 1
                if polls % 25 == 0 and (last_step(log) or 0) > k:  # it passed that save: take the next
                    k += every
                time.sleep(0.002)
            saving = f"global_step{k}"
        if not proc.is_running():
            self.missed.append(f"{stage}/{kind}: the process ended before the kill")
            return None
        at = time.monotonic() - self.t0
        proc.kill()  # SIGKILL
        proc.wait(timeout=30)
        committed, uncommitted = ckpt_dirs(ckpt)
        time.sleep(1.5)  # the dead rank's last lines reach the job log
        return Kill(
            stage,
            kind,
            sid,
            proc.pid,
            at,
            start,
            max(last_step(log) or 0, start),
            saving if saving in uncommitted else None,
            committed,
            uncommitted,
        )

    @staticmethod
    def _total(log: Path, proc) -> int | None:
        found = EVENT.findall(read(log))
        if not proc.is_running():
            return 0
        return int(found[-1][1]) if found else None


def check_resumes(address: str, run_name: str, kills: list[Kill], save: dict[str, int]) -> list[str]:
    """Each kill against the next attempt's log: where it resumed, and what the last attempt ran.
    Returns what went wrong."""
    problems = []
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(address)
    jobs = ray_jobs(address, run_name)
    for kill in kills:
        killed = next(j for j in jobs if j.submission_id == kill.sid)
        same = [j for j in jobs if j.metadata["alignflow_output"] == killed.metadata["alignflow_output"]]
        if killed.status.value != "FAILED":
            problems.append(f"{kill.stage} attempt {kill.sid} ended {killed.status.value}")
        pattern = (
            r"resuming PPO from (\S+/global_step\d+) " if kill.stage == "ppo" else r"resumed from (\S+/global_step\d+) "
        )
        start_killed = {k.sid for k in kills if k.kind == "start"}
        for nxt in same[same.index(killed) + 1 :]:  # an attempt killed while it started may not have got to load
            log = client.get_job_logs(nxt.submission_id)
            m = re.search(pattern, log)
            if m or nxt.submission_id not in start_killed:
                break
        kill.resumed = m.group(1).rsplit("/", 1)[1] if m else None
        newest = kill.committed[-1] if kill.committed else None
        # the newest checkpoint committed when the process died, never a half-written one
        kill.lost = kill.step - step_of(kill.resumed)
        if kill.resumed != newest or kill.resumed in kill.uncommitted:
            problems.append(f"{kill.stage} attempt {kill.sid}: resumed from {kill.resumed}, newest committed {newest}")
        if not 0 <= kill.lost <= save[kill.stage]:
            problems.append(f"{kill.stage} attempt {kill.sid}: {kill.lost} steps lost")
    for output in {j.metadata["alignflow_output"] for j in jobs}:
        same = [j for j in jobs if j.metadata["alignflow_output"] == output]
        if same[-1].status.value != "SUCCEEDED":
            problems.append(f"{output}: {[j.status.value for j in same]}")
        mine = [k for k in kills if k.sid in {j.submission_id for j in same}]
        if mine:  # the successful attempt ran exactly the steps after its resume point
            log = client.get_job_logs(same[-1].submission_id)
            m = re.search(r"(?:resuming PPO|resumed) from \S+/global_step(\d+) ", log)
            first = int(m.group(1)) + 1 if m else 1
            ran = re.search(r"ran (?:optimizer steps|iterations) (\d+)\.\.(\d+) of (\d+)", log)
            if not (ran and int(ran.group(1)) == first and ran.group(2) == ran.group(3)):
                problems.append(f"{output}: the last attempt resumed at {first} but ran {ran and ran.group(0)}")
    return problems
