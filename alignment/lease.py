"""One writer per output: a lease object beside the output, taken before a stage trains, and checked by
every commit (a fence).

Two runs writing one --save_path would both train, write the same checkpoints and the last commit
would win. So before it trains, the run that owns the output (the CLI's driver or in-process trainer,
rank 0 under torchrun/deepspeed) creates `<parent>/.<name>.lease` — atomically: O_CREAT|O_EXCL on a
local path, a conditional PUT (If-None-Match: *) on S3 — holding who it is, and rewrites it every
TTL/4 seconds (the heartbeat). Its --ckpt_path, when it is a folder of its own, is leased the same
way. A second writer finds the lease and stops with one line naming the holder (LeaseHeld: exit 75, so
a flow retries it later).

A lease is taken over only when its holder is dead. On the holder's own host (same boot) that means its
process is gone — whatever its heartbeat says: a holder stopped with Ctrl-Z or a Slurm suspend is alive
and keeps its lease. From another host it means a heartbeat older than the TTL (ALIGNFLOW_LEASE_TTL_S,
default 60 s; hosts' clocks must agree to within a fraction of it). The ranks and workers a driver
starts inherit its leases through ALIGNFLOW_LEASE and ALIGNFLOW_LEASE_ROOTS.

The fence: a takeover, a heartbeat and every commit of the output or a checkpoint (`fenced`) is a
conditional write against the lease as last read — If-Match on its ETag on S3, compare-and-write under a
lock locally (alignment/storage/conditional.py). A holder that was paused or cut off past the TTL and
taken over finds the lease changed before its next checkpoint or commit and stops (LeaseLost) without
writing. On S3 the commit's own PUT follows the lease check by one request; a holder frozen in exactly
that gap for a whole TTL could still land one commit (S3 cannot make one PUT conditional on another
object).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Iterator

from alignment import storage
from alignment.errors import TransientError
from alignment.storage import conditional

log = logging.getLogger(__name__)
ENV = "ALIGNFLOW_LEASE"  # the run's owner id, shared by every lease it holds and by its ranks
ROOTS_ENV = "ALIGNFLOW_LEASE_ROOTS"  # the leased locations, JSON: which lease fences a commit


class LeaseHeld(TransientError):
    """Another live run holds the output's lease."""


class LeaseLost(TransientError):
    """This run's lease was taken over (it was paused or cut off past the TTL): it must not write."""


_held: list["Lease"] = []  # this process's leases, released by release_all when a CLI's main returns


def release_all() -> None:
    while _held:
        _held.pop().release()


def shared_env() -> dict[str, str]:
    """What a driver hands the ranks and workers it starts, so that they write under its leases."""
    return {ENV: os.environ.get(ENV, ""), ROOTS_ENV: os.environ.get(ROOTS_ENV, "[]")}


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _started(pid: int) -> str:
    """The process's start time in clock ticks since boot: tells a pid reused by another process apart."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


@dataclass(frozen=True)
class Holder:
    owner: str  # the run's id (ENV)
    host: str
    boot: str  # the host's boot id: a pid means nothing after a reboot
    pid: int
    what: str  # the command that holds it
    heartbeat: float  # time.time() of the last heartbeat
    started: str = ""  # the holder process's start time (_started)

    @classmethod
    def this_process(cls, owner: str, what: str) -> "Holder":
        pid = os.getpid()
        return cls(owner, socket.gethostname(), _boot_id(), pid, what, time.time(), _started(pid))

    def describe(self) -> str:
        return f"{self.what} (pid {self.pid} on {self.host}, last heartbeat {time.time() - self.heartbeat:.0f} s ago)"

    def dead(self, ttl_s: float) -> bool:
        """On its own host: its process is gone (a live one is never taken over, however old its heartbeat).
        Elsewhere: its heartbeat is older than the TTL."""
        if self.host != socket.gethostname() or self.boot != _boot_id():
            return time.time() - self.heartbeat > ttl_s
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another user's
            pass
        return bool(self.started) and _started(self.pid) != self.started  # the pid now names another process

    def text(self) -> str:
        return json.dumps(asdict(self))


def lease_uri(output_uri: str) -> str:
    parent, _, name = output_uri.rstrip("/").rpartition("/")
    return f"{parent}/.{name}.lease" if parent else f".{name}.lease"


def ttl_s() -> float:
    return float(os.environ.get("ALIGNFLOW_LEASE_TTL_S", "60"))


def _parse(text: str | None) -> Holder | None:
    if text is None:
        return None
    try:
        return Holder(**json.loads(text))
    except (ValueError, TypeError):  # torn by a crash mid-write on a filesystem without atomic writes
        return Holder("?", "?", "", 0, "an unreadable lease", 0.0)


def _read(uri: str) -> tuple[Holder | None, str]:
    text, tag = conditional.read_tagged(uri)
    return _parse(text), tag


def _key(uri: str) -> str:
    """One spelling per location, to match a commit's path against the leased ones."""
    if storage.is_remote(uri):
        return uri.rstrip("/")
    return os.path.realpath(os.path.expanduser(uri.removeprefix("file://")))


def _add_root(output_uri: str) -> None:
    roots = json.loads(os.environ.get(ROOTS_ENV, "[]"))
    if _key(output_uri) not in roots:
        os.environ[ROOTS_ENV] = json.dumps([*roots, _key(output_uri)])


class Lease:
    """The lease on one output, held from `acquire` until `release` (or the process ends)."""

    def __init__(self, output_uri: str, what: str):
        self.uri, self.output, self.what = lease_uri(output_uri), output_uri, what
        self.holder: Holder | None = None
        self._stop = threading.Event()

    def acquire(self) -> "Lease":
        owner = os.environ.get(ENV) or uuid.uuid4().hex
        for _ in range(5):
            mine = Holder.this_process(owner, self.what)
            with conditional.locked(self.uri):
                if conditional.create(self.uri, mine.text()):
                    return self._hold(mine)
                found, tag = _read(self.uri)
                if found is None:
                    continue  # released in between: try again
                if found.owner == owner:
                    _add_root(self.output)
                    return self  # a rank of the run that holds it
                if not found.dead(ttl_s()):
                    raise LeaseHeld(
                        f"{self.output} is being written by {found.describe()}; its lease is {self.uri}: "
                        f"wait for that run to end, or write to another path"
                    )
                if conditional.replace(self.uri, mine.text(), tag):  # two takers: one wins, the other retries
                    log.warning("took over the lease on %s from %s, which is gone", self.output, found.describe())
                    return self._hold(mine)
        raise LeaseHeld(f"{self.output}: could not take its lease {self.uri} (other writers keep taking it)")

    def _hold(self, mine: Holder) -> "Lease":
        self.holder = mine
        os.environ[ENV] = mine.owner  # the ranks this process starts share it
        _add_root(self.output)
        threading.Thread(target=self._beat, daemon=True, name="alignflow-lease").start()
        atexit.register(self.release)
        _held.append(self)
        return self

    def _beat(self) -> None:
        while not self._stop.wait(ttl_s() / 4):
            try:
                with conditional.locked(self.uri):
                    found, tag = _read(self.uri)
                    if found is None or self.holder is None or found.owner != self.holder.owner:
                        log.error(
                            "lost the lease on %s (now held by %s): this run will not write there again",
                            self.output,
                            found.describe() if found else "nobody",
                        )
                        return
                    beat = Holder(**{**asdict(found), "heartbeat": time.time()})
                    if conditional.replace(self.uri, beat.text(), tag):
                        self.holder = beat
            except storage.StorageError as e:  # a store outage: the run's own store calls will say so
                log.warning("lease heartbeat on %s failed: %s", self.output, e)

    def release(self) -> None:
        self._stop.set()
        if self.holder is None:
            return
        try:
            with conditional.locked(self.uri):
                found, tag = _read(self.uri)
                if found is not None and found.owner == self.holder.owner:
                    conditional.delete(self.uri, tag)
        except storage.StorageError as e:
            log.warning("could not release the lease %s (%s); it expires by itself", self.uri, e)
        self.holder = None


@contextmanager
def fenced(uri: str) -> Iterator[None]:
    """Around a commit at `uri` (an output or a checkpoint under a leased location): proceed only while this
    run still holds the lease covering it, checked by a conditional write of that lease (module docstring).
    A process outside any leased run (a library call, a test) commits unfenced."""
    owner, key = os.environ.get(ENV), _key(uri)
    roots = [r for r in json.loads(os.environ.get(ROOTS_ENV, "[]")) if key == r or key.startswith(r.rstrip("/") + "/")]
    if not owner or not roots:
        yield
        return
    root = max(roots, key=len)
    luri = lease_uri(root)
    with conditional.locked(luri):
        found, tag = _read(luri)
        if found is not None and found.owner == owner:
            beat = Holder(**{**asdict(found), "heartbeat": time.time()})
            if storage.is_remote(luri) and not conditional.replace(luri, beat.text(), tag):
                found, _ = _read(luri)
        if found is None or found.owner != owner:
            raise LeaseLost(
                f"{root}: this run's lease was taken over by {found.describe() if found else 'nobody (deleted)'} "
                f"while it was paused or cut off for longer than the lease's {ttl_s():.0f} s; nothing was "
                f"written, and that run writes {root} now"
            )
        yield


def lost(uri: str) -> str:
    """ "" while this run holds the lease covering `uri` (or none covers it); else the reason it must not write
    there (LeaseLost's line). Asked before a checkpoint's files are written, not only at its commit."""
    try:
        with fenced(uri):
            return ""
    except LeaseLost as e:
        return str(e)
