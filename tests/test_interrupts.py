"""Interrupts that explain themselves: Ctrl-C of a stage CLI and SIGTERM of the demo end with one line
saying what was committed, what resumes from which checkpoint and how to continue; the demo run again
continues (committed stages skipped, the interrupted one from its checkpoint). A kill -9ed flow leaves nothing
running (one demo test: killed, then terminated, then finished)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from alignflow.tasks.cluster.head_watchdog import head_processes
from alignment import storage
from alignment.tiny_world.paths import tiny_dir
from alignment.training.resume_point import find_latest
from tests.conftest import REPO, python_env

pytestmark = pytest.mark.integration


def wait_for(found, proc: subprocess.Popen, timeout_s: float = 300):
    deadline = time.monotonic() + timeout_s
    while not (hit := found()):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)
    return hit


def interrupted_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("interrupted")]


def test_ctrl_c_of_a_stage_cli_names_its_checkpoint(tiny_base, tmp_path):
    out, ckpt = tmp_path / "model", tmp_path / "ckpt"
    cmd = [
        sys.executable,
        "-m",
        "alignment.cli.train_sft",
        "--pretrain",
        str(tiny_base),
        "--dataset",
        f"{tiny_dir()}/sft/train.jsonl",
        "--input_key",
        "input",
        "--output_key",
        "output",
        "--max_len",
        "64",
        "--train_batch_size",
        "8",
        "--micro_train_batch_size",
        "8",
        "--max_steps",
        "2000",
        "--max_epochs",
        "100",
        "--save_steps",
        "2",
        "--save_path",
        str(out),
        "--ckpt_path",
        str(ckpt),
    ]
    # SIGINT as a terminal delivers it: a suite started in the background (`cmd &`, as a CI script may) passes
    # its children SIGINT ignored, and Python then keeps ignoring it
    proc = subprocess.Popen(
        cmd,
        env=python_env(OMP_NUM_THREADS="2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    wait_for(lambda: (ckpt / "latest").exists(), proc)  # a checkpoint is committed (retention keeps the newest 3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    lines = interrupted_lines(err)
    assert proc.returncode == 130 and len(lines) == 1, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert (
        f"interrupted (Ctrl-C): this run committed nothing at --save_path {out}; its newest checkpoint is "
        f"{ckpt}/global_step"
        in lines[0]
        and "run the same command with --load_checkpoint" in lines[0]
    ), lines[0]
    assert not out.exists() and not (tmp_path / ".model.lease").exists()  # nothing staged left, lease released


def short_demo(root: Path) -> list[str]:
    """`make demo` (scripts/demo.py) with short stages in a private root: SFT checkpointing every 10 of 120
    steps, PPO scored by the tiny world's rule (no RM stage; what tests interrupt is SFT), no refills."""
    ppo = {
        "max_samples": 16,
        "num_episodes": 1,
        "remote_rm_url": str(tiny_dir() / "reward_func.py"),
        "normalize_reward": False,
        "dynamic_filtering": False,  # the recipe's refills: its learning budget, not these tests'
    }
    sft = {"max_steps": 120, "save_steps": 10, "logging_steps": 1, "eval_dataset": None}
    script = str(REPO / "scripts" / "demo.py")
    return [
        sys.executable,
        script,
        "--root",
        str(root),
        "--no_heldout_eval",
        "--sft",
        json.dumps(sft),
        "--ppo",
        json.dumps(ppo),
    ]


def watchdogs_of(pid: int) -> list[psutil.Process]:
    """The head watchdogs the process `pid` started (their first argument is that pid): one a Ray head."""
    dogs = []
    for p in psutil.process_iter(["cmdline"]):
        args = p.info["cmdline"] or []
        if "alignflow.tasks.cluster.head_watchdog" in args and args[
            args.index("alignflow.tasks.cluster.head_watchdog") + 1
        ] == str(pid):
            dogs.append(p)
    return dogs


def watchdog_of(pid: int) -> psutil.Process:
    """The head watchdog the flow process `pid` started (a demo's flow starts one head)."""
    dogs = watchdogs_of(pid)
    if not dogs:
        raise AssertionError(f"no head watchdog of {pid}")
    return dogs[0]


def test_demo_killed_then_terminated_leaves_a_checkpoint_to_resume(tmp_path):
    """`make demo` is scripts/demo.py; here with short stages (its --sft/--ppo) in a private root, run three times.

    1. kill -9 of the flow process mid-SFT (alignflow/tasks/cluster/head_watchdog.py): soon after, no process of its
       embedded Ray head, of its job or that the flow had started (the ephemeral Prefect API) is alive. The watchdog
       takes a second or two; the test allows a minute (how fast is a benchmark's question, and a loaded 2-core CI
       machine once took more than 10 s).
    2. The rerun takes the dead run's output slot over at once (alignflow/tasks/orchestration/output_slot.py) and
       resumes SFT from its checkpoint; SIGTERM once it has committed a newer one: one line says what was committed,
       what resumes from which checkpoint and how to continue, SFT's model is not committed, and the checkpoint the
       line names verifies (its files' hashes, its state) as the one a third run resumes from. (That a resumed
       pipeline then finishes: the resume tests of every stage kind and the flow-run retry of tests/test_deployment.py;
       a third demo here was 3 minutes of CI's 60.)"""
    root = tmp_path / "demo"
    cmd = short_demo(root)
    env = python_env(PREFECT_HOME=str(tmp_path / "prefect"))
    env.pop("PREFECT_API_URL", None)  # the demo's own ephemeral API, as on a user's machine
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        latest = wait_for(lambda: next((root / "store" / "demo").glob("sft-*/checkpoints/latest"), None), proc, 600)
        dog = watchdog_of(proc.pid)
        temp_dir, gcs_port = dog.cmdline()[-2], int(dog.cmdline()[-1])
        running = {
            p.pid: p for p in [*psutil.Process(proc.pid).children(recursive=True), *head_processes(temp_dir, gcs_port)]
        }
        assert len(running) >= 5, running  # the head's daemons, the job's driver and rank, the API server
    finally:
        proc.kill()
        proc.wait()
    killed, deadline = time.monotonic(), time.monotonic() + 60
    while (alive := [p for p in running.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.5)
    assert not alive, (time.monotonic() - killed, [(p.pid, p.cmdline()[:3]) for p in alive])

    # a newer committed checkpoint (retention keeps the newest 2, so no particular step), then SIGTERM: the 100 steps
    # after the second checkpoint leave the signal time to land before SFT would commit its model (it lands within
    # 2 steps), and are what the third run trains
    first = latest.read_text().strip()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: latest.exists() and latest.read_text().strip() != first, proc, 600)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=180)
    shown, lines = out + err, interrupted_lines(err)
    assert proc.returncode == 143 and len(lines) == 1, shown[-4000:]
    sft_dir = latest.parents[1]
    resumed = f"resuming stage sft from committed checkpoint {sft_dir}/checkpoints/{first}"
    assert "which is gone: freeing it" in shown and resumed in shown, shown[-4000:]
    assert "Exception in callback" not in err and "Fatal Python error" not in err, err[-4000:]
    assert (
        lines[0].startswith(
            f"interrupted: committed: tiny_base; sft resumes from its checkpoint {sft_dir}/checkpoints/global_step"
        )
        and "run this command again" in lines[0]
    ), lines[0]
    assert not storage.is_committed(sft_dir / "model")
    newest = find_latest(str(sft_dir / "checkpoints"))  # what the next run resumes from: newer than run 1's, whole
    assert newest is not None and newest.name != first and f"checkpoint {newest.uri}" in lines[0], lines[0]


CHILD = """
import multiprocessing, os, signal, sys, time
from alignment.cli import interrupt
interrupt.install()
def wait():
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        sys.exit(3)  # the stage's Python-level handler came through the fork
    time.sleep(30)
ctx = multiprocessing.get_context("fork")
child = ctx.Process(target=wait)
child.start()
time.sleep(0.5)
os.kill(child.pid, signal.SIGTERM)
child.join(10)
print(child.exitcode)
"""


def test_a_forked_child_stopped_by_sigterm_dies_quietly():
    """A --dataset_num_proc pool's workers are forked from a stage CLI and stopped by SIGTERM when a row is
    refused: they start with the default SIGTERM (exit 3 if not) and die by it (-15), without a traceback.
    With the stage's Python-level handler a worker signalled just before it blocked on the pool's queue lock
    never ran it, and the CLI hung joining it (test_cli_prints_a_bad_row_of_num_proc_2_as_one_line, now and then)."""
    proc = subprocess.run(
        [sys.executable, "-c", CHILD], env=python_env(), capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(-signal.SIGTERM), proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr


TWICE = """
import time
from alignflow.tasks.orchestration.interrupted import sigterm_as_ctrl_c
got = sigterm_as_ctrl_c()
try:
    print("ready", flush=True)
    time.sleep(30)
except KeyboardInterrupt:
    print("stopping", flush=True)
    time.sleep(1.0)  # the cleanup: stopping the Ray job, the head, the API server
    print("stopped", got["signal"], flush=True)
"""


def test_a_second_sigterm_does_not_cut_the_cleanup_short():
    """`timeout` and a `pkill` together send two SIGTERMs: the second one, arriving while the first one's
    cleanup runs, must not raise inside it (it did: the cleanup was cut short)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", TWICE],
        env=python_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.stdout.readline().strip() == "stopping"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert out.strip() == f"stopped {int(signal.SIGTERM)}", out + err
    assert "already stopping" in err and "Traceback" not in err, err
