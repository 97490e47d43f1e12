"""kill -9 at random points inside real flows (Prefect -> Ray job -> DeepSpeed), issue 21's chaos run.

One sft-rm-ppo flow and one iterative-DPO round run with short budgets while a killer thread
SIGKILLs the stage's training process (the rank actor for SFT, RM and DPO; the PPO driver,
which runs the iterations and commits the checkpoints) five times: RM, PPO and DPO once right when a
checkpoint directory appears (a save in progress: files being written, no MANIFEST.json yet), a
random step of SFT (a rank actor), and a random moment of a DPO retry's start-up (while it loads the
checkpoint). The stage task retries the failed job, which
resumes from the newest committed checkpoint. The same flows run uninterrupted under another
run name, at the same time (the 2 cores share the start-ups), and the final models are compared.

Asserted: every flow completes; after every kill the next attempt resumed from the newest
checkpoint committed when the process died (never from the half-written one, which is still
without MANIFEST.json), or from scratch when none was committed; the successful attempt ran
exactly the steps after it; steps lost per kill <= the save interval; every final model equals
the uninterrupted run's (max |dw| < 1e-5). Marked `chaos` (`make test-chaos`)."""

from __future__ import annotations

import asyncio
import glob
import os
import random
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from safetensors.torch import load_file

from alignflow.flows.iterative_dpo import iterative_dpo_flow
from alignflow.flows.sft_rm_ppo import sft_rm_ppo_flow
from alignment import storage
from tests.conftest import REPO
from tests.test_stage_runner import ray_jobs

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

SEED = int(os.environ.get("ALIGNFLOW_CHAOS_SEED", "2111"))
RETRIES = 5  # at most 2 kills per stage; Prefect waits 2, 4, 8 s (+-20 %) before the retries
SAVE = {"sft": 4, "rm": 4, "ppo": 2, "dpo": 4}  # checkpoint interval: steps (PPO: iterations)
SFT = {"max_steps": 24, "save_steps": SAVE["sft"], "eval_dataset": None, "logging_steps": 1}
RM = {"max_steps": 16, "save_steps": SAVE["rm"], "eval_dataset": None, "logging_steps": 1}
# 6 iterations of 4 prompts x 4 samples, one optimizer step each
PPO = {
    "max_samples": 24,
    "rollout_batch_size": 4,
    "n_samples_per_prompt": 4,
    "micro_rollout_batch_size": 16,
    "train_batch_size": 16,
    "micro_train_batch_size": 16,
    "num_episodes": 1,
    "save_steps": SAVE["ppo"],
    "dynamic_filtering": False,  # the recipe's refills are its learning budget; the kills are this test's point
}
# one round: 32 prompts x 2 samples scored by the flow's RM (scores differ, so nearly every prompt
# gives a pair), then DPO on them, 2 pairs a step
GENERATE = {
    "eval_task": "generate",
    "dataset": f"json@{REPO / 'data' / 'tiny' / 'prompts'}",
    "input_key": "context_messages",
    "apply_chat_template": True,
    "rollout_batch_size": 32,
    "best_of_n": 2,
    "max_new_tokens": 16,
    "temperature": 1.0,
    "micro_batch_size": 64,
    "post_processor": "iter_dpo",
}
DPO = {
    "max_epochs": 2,
    "max_steps": 16,
    "train_batch_size": 2,
    "micro_train_batch_size": 2,
    "save_steps": SAVE["dpo"],
    "logging_steps": 1,
}
# the kills, in the order each stage's attempts meet them: each kill point once (5 in all). A random step
# of RM or DPO kills the same rank actor at the same place as SFT's; a mid-save kill where the checkpoint's
# state differs (RM's reward statistics with the rank actor's, DPO's reference model, PPO's driver: a random
# step of the driver resumes the way its mid-save kill does); DPO's retry killed while it loads its checkpoint
PLAN = {"sft": ["step"], "rm": ["save"], "ppo": ["save"], "dpo": ["save", "start"]}
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

    def __init__(self, address: str, run_name: str, plan: dict[str, list[str]], rng: random.Random, t0: float):
        super().__init__(daemon=True)
        self.address, self.run_name, self.plan, self.rng, self.t0 = address, run_name, plan, rng, t0
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
            every, existing = SAVE[stage], ckpt_dirs(ckpt)
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


def start_prefect_api() -> None:
    """Two flows start at once below: the session's temporary Prefect server must already be up
    (two threads starting it together race for its port)."""
    from prefect import flow

    @flow(name="chaos-warm-up")
    def warm_up() -> None:
        return None

    warm_up()


def run_in_thread(fn, outcome: dict, key: str) -> threading.Thread:
    def body():
        try:
            outcome[key] = asyncio.run(fn())
        except Exception as e:  # noqa: BLE001 - asserted on below
            outcome[key + "_error"] = e

    t = threading.Thread(target=body)
    t.start()
    return t


def max_delta(a_dir: str, b_dir: str) -> float:
    a, b = load_file(Path(a_dir) / "model.safetensors"), load_file(Path(b_dir) / "model.safetensors")
    assert a.keys() == b.keys()
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


def check_resumes(address: str, run_name: str, kills: list[Kill]) -> list[str]:
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
        if not 0 <= kill.lost <= SAVE[kill.stage]:
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


@pytest.mark.timeout(1500)  # ~8 min on a loaded 2-core CI worker; more on a slower one
def test_kill9s_across_sft_rm_dpo_ppo_flows_complete_and_match(ray_head, tiny_base, tmp_path):
    rng = random.Random(SEED)
    print(f"\nchaos seed {SEED} (ALIGNFLOW_CHAOS_SEED)")
    store = str(tmp_path / "store")
    start_prefect_api()
    chain = dict(
        store=store,
        ray_address=ray_head,
        retries=RETRIES,
        recipe="tiny",
        sft={**SFT, "pretrain": str(tiny_base)},
        rm=RM,
        ppo=PPO,
    )
    t0 = time.monotonic()
    outcome: dict = {}
    plan = {s: list(k) for s, k in PLAN.items()}
    killer = Killer(ray_head, "chaos", plan, random.Random(rng.random()), t0)
    killer.start()
    chaos = run_in_thread(lambda: sft_rm_ppo_flow(run_name="chaos", **chain), outcome, "chaos")
    clean = run_in_thread(lambda: sft_rm_ppo_flow(run_name="clean", **chain), outcome, "clean")
    chaos.join(timeout=800)
    clean.join(timeout=800)
    assert "chaos" in outcome and "clean" in outcome, outcome
    sft_uri, rm_uri = outcome["chaos"]["sft"]["model_uri"], outcome["chaos"]["rm"]["model_uri"]
    t_chain = time.monotonic() - t0

    # one iterative-DPO round from the chaos run's SFT model, pairs scored by its RM; the clean
    # round starts from the same two models, so the DPO comparison sees only the DPO kills
    recipe = tmp_path / "dpo-only"  # the tiny-idpo DPO config; generation from GENERATE alone
    recipe.mkdir()
    shutil.copy(REPO / "deployments" / "recipes" / "tiny-idpo" / "dpo.yaml", recipe / "dpo.yaml")
    dpo = dict(
        store=store,
        ray_address=ray_head,
        retries=RETRIES,
        initial_policy=sft_uri,
        rounds=1,
        recipe=str(recipe),
        generate={**GENERATE, "reward_pretrain": rm_uri},
        dpo=DPO,
    )
    chaos = run_in_thread(lambda: iterative_dpo_flow(run_name="chaos", **dpo), outcome, "chaos_dpo")
    clean = run_in_thread(lambda: iterative_dpo_flow(run_name="clean", **dpo), outcome, "clean_dpo")
    chaos.join(timeout=800)
    clean.join(timeout=800)
    killer.stop.set()
    killer.join(timeout=60)
    assert "chaos_dpo" in outcome and "clean_dpo" in outcome, outcome
    wall = time.monotonic() - t0

    kills = killer.kills
    problems = check_resumes(ray_head, "chaos", kills)
    print(f"\n{'stage':5} {'kind':5} {'at':>6} {'step':>4}  {'saving (no MANIFEST)':20} {'resumed from':14} lost")
    for k in kills:
        print(
            f"{k.stage:5} {k.kind:5} {k.at_s:5.1f}s {k.step:4d}  {k.saving or '-':20} {k.resumed or '(scratch)':14} "
            f"{k.lost}"
        )
    deltas = {
        s: max_delta(outcome["chaos"][s]["model_uri"], outcome["clean"][s]["model_uri"]) for s in ("sft", "rm", "ppo")
    }
    # same generated pairs in both rounds (seeded sampling): then the DPO models must agree
    data = [storage.read_text(o["history"][0]["data"]) for o in (outcome["chaos_dpo"], outcome["clean_dpo"])]
    assert data[0] == data[1] and data[0].count("\n") >= 8
    deltas["dpo"] = max_delta(outcome["chaos_dpo"]["model_uri"], outcome["clean_dpo"]["model_uri"])
    print("max |dw| vs uninterrupted: " + ", ".join(f"{s} {d:.2e}" for s, d in deltas.items()))
    print(
        f"kills {len(kills)} (missed: {killer.missed}); sft-rm-ppo flows {t_chain:.0f}s, "
        f"with the DPO rounds {wall:.0f}s"
    )
    assert not problems, problems
    assert len(kills) == sum(map(len, PLAN.values())) and not killer.missed, killer.missed
    assert {k.stage for k in kills} == {"sft", "rm", "ppo", "dpo"}
    assert sum(k.saving is not None for k in kills) >= 2  # landed mid-save; the retry never loaded it
    assert all(d < 1e-5 for d in deltas.values()), deltas
