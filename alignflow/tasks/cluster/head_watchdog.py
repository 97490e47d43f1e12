"""A killed flow leaves nothing running: the processes of its embedded Ray head, found by PID, stopped when
the flow ends, however it ends.

The flow stops its head in a `finally` (alignflow/tasks/cluster/ray_cluster.py, local_head), which a kill -9, an OOM
kill or a lost container never runs: the head, its job and the job's ranks then train on and finish the stage with
nobody watching (27 of 29 processes did, in an outside probe). So next to the head the flow starts this watchdog in a
session of its own (a kill of the flow's process group leaves it): every second it checks that the flow is alive;
every five it notes the flow process's descendants (the ephemeral Prefect API server) and the head's processes (each
look walks every process on the machine: done every second, it took ~3 % of a core on a busy 2-core host); when the
flow is gone, it kills all it knows at once (SIGKILL), then what started since, removes the
head's temp dir and exits. The flow's own `finally` stops the watchdog first.

    python -m alignflow.tasks.cluster.head_watchdog PARENT_PID TEMP_DIR GCS_PORT
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

POLL_S = 1.0
SCAN_S = 5.0  # how often the flow's descendants and the head's processes are looked up while the flow lives


def head_processes(temp_dir: Path, gcs_port: int) -> list[psutil.Process]:
    """The Ray processes (psutil) of the head in `temp_dir` or talking to its GCS port, with their descendants."""
    # the port as a whole number: ":5979" must not match another cluster's ":59799" (it stopped that one's ranks)
    mark = re.compile(rf"{re.escape(str(temp_dir))}(?![\w-])|:{gcs_port}(?!\d)")
    procs: dict[int, psutil.Process] = {}
    children: dict[int, list[int]] = {}
    mine = []
    # one walk of the machine's processes (psutil's children() walks them all again for each process it asks about)
    for p in psutil.process_iter(["pid", "ppid", "cmdline"]):
        procs[p.pid] = p
        children.setdefault(p.info["ppid"], []).append(p.pid)
        args = p.info["cmdline"] or []  # None where it could not be read (gone, or not ours)
        if p.pid != os.getpid() and any(mark.search(arg) for arg in args) and "ray" in " ".join(args):
            mine.append(p.pid)
    found: set[int] = set()
    while mine:  # agents and workers retitle themselves "ray::…": found as descendants
        pid = mine.pop()
        if pid not in found:
            found.add(pid)
            mine.extend(children.get(pid, []))
    return [procs[pid] for pid in found]


def terminate(procs: list[psutil.Process]) -> None:
    for p in procs:
        if p.pid != os.getpid():
            with contextlib.suppress(psutil.NoSuchProcess):
                p.terminate()


def kill(procs: list[psutil.Process]) -> None:
    for p in procs:
        if p.pid != os.getpid():
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()


def stop(procs: list[psutil.Process], grace_s: float = 3.0) -> int:
    """SIGTERM, then SIGKILL what is left after `grace_s`; returns how many there were."""
    procs = [p for p in procs if p.pid != os.getpid()]
    terminate(procs)
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=grace_s)
    return len(procs)


def stop_head(temp_dir: Path, gcs_port: int, grace_s: float = 3.0) -> int:
    """Stop exactly the Ray processes of the head in `temp_dir` (or talking to its GCS port), by PID.

    Not `ray stop`: that stops every Ray process on the machine, other clusters included."""
    return stop(head_processes(temp_dir, gcs_port), grace_s)


def start(temp_dir: Path, gcs_port: int) -> subprocess.Popen:
    """The watchdog of this process's head (module docstring); its log goes beside the head's."""
    with (temp_dir / "watchdog.log").open("w") as f:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "alignflow.tasks.cluster.head_watchdog",
                str(os.getpid()),
                str(temp_dir),
                str(gcs_port),
            ],
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def watch(parent: psutil.Process, temp_dir: Path, gcs_port: int) -> int:
    """Until `parent` is gone; then stop its head and what it had started. Returns the processes stopped."""
    seen: dict[int, psutil.Process] = {}
    scanned = 0.0
    while True:
        try:
            if not parent.is_running() or parent.status() == psutil.STATUS_ZOMBIE:
                break
            if time.monotonic() - scanned > SCAN_S:  # the processes known ahead: no scan when it counts
                seen.update({p.pid: p for p in parent.children(recursive=True)})
                seen.update({p.pid: p for p in head_processes(temp_dir, gcs_port)})
                scanned = time.monotonic()
        except psutil.NoSuchProcess:
            break
        time.sleep(POLL_S)
    # psutil.Process remembers each one's start time: a pid reused since is not is_running(), never signalled.
    # SIGKILL, not SIGTERM and a grace period: the flow that owned the stage is gone, so nothing is left to shut
    # down cleanly (a checkpoint is committed whole or not at all), and a kill needs no CPU of its victims. On a
    # loaded 2-core CI machine, a graceful round (the head's daemons and ranks each shutting down, under CPU
    # contention) kept the gcs_server and a rank alive past 10 s. What was known dies at once; the scan after it
    # adds what started since (a worker, a job's rank).
    known = [p for p in seen.values() if p.is_running()]
    kill(known)
    late = [p for p in head_processes(temp_dir, gcs_port) if p.pid not in seen]
    kill(late)
    psutil.wait_procs([*known, *late], timeout=5.0)
    shutil.rmtree(temp_dir, ignore_errors=True)
    return len(known) + len(late)


def main(argv: list[str]) -> int:
    pid, temp_dir, gcs_port = int(argv[0]), Path(argv[1]), int(argv[2])
    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        parent = None
    stopped = watch(parent, temp_dir, gcs_port) if parent else stop_head(temp_dir, gcs_port)
    print(f"flow process {pid} is gone: stopped {stopped} processes of its Ray head and its children", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
