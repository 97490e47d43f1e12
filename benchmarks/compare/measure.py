"""Run one benchmark subprocess and measure it: wall time, exit status, peak memory.

Peak memory is the larger of two readings:
  - the kernel's high-water mark of the child and every descendant it waited for
    (`ru_maxrss` from `os.wait4`: exact for a single-process run, never sampled);
  - the highest sum of RSS over the whole process tree, sampled every 0.2 s. The benchmark
    process makes itself a child subreaper, so daemons a run leaves behind (`ray start` forks
    its GCS and raylet and exits) stay in the tree and are counted.
RSS sums count shared pages once per process; multi-process figures (Ray, vLLM) are upper bounds.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Orphans of our runs re-parent to this process (Linux), so the tree sampler sees them."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_kib(root: int) -> int:
    """Sum of RSS of every descendant of `root` (root excluded)."""
    kids = _children()
    total, todo = 0, list(kids.get(root, []))
    while todo:
        pid = todo.pop()
        total += _rss_kib(pid)
        todo.extend(kids.get(pid, []))
    return total


def _reap_orphans(keep: int) -> None:
    """Wait for zombie orphans re-parented to us (never the run's own child `keep`)."""
    for pid in _children().get(os.getpid(), []):
        if pid == keep:
            continue
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                os.waitpid(pid, os.WNOHANG)
        except (OSError, ChildProcessError):
            pass


@dataclass
class RunResult:
    cmd: list[str]
    returncode: int
    wall_s: float
    peak_rss_mb: float
    log: Path


def run_measured(cmd: list[str], env: dict[str, str], cwd: Path, log: Path, timeout_s: float = 3600) -> RunResult:
    """Run `cmd` with stdout+stderr to `log`; measure wall time and peak memory."""
    log.parent.mkdir(parents=True, exist_ok=True)
    peak = [0]
    done = threading.Event()
    with log.open("w") as out:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], tree_rss_kib(os.getpid()))
                _reap_orphans(proc.pid)
                done.wait(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        deadline = t0 + timeout_s
        status, usage = 0, None
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        wall = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        time.sleep(0.3)  # let left-over daemons (if any) be seen once more, then stop sampling
        done.set()
        sampler.join()
    peak_kib = max(peak[0], usage.ru_maxrss if usage else 0)
    return RunResult(cmd, proc.returncode, wall, peak_kib / 1024, log)


def tail(path: Path, chars: int = 3000) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return text[-chars:]


@dataclass
class Stats:
    """min / median / max of one side's repeated measurements."""

    values: list[float]

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def max(self) -> float:
        return max(self.values)
