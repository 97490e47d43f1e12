"""One writer per output: a lease object beside the output, taken before a stage trains.

Two runs writing one --save_path would both train, write the same checkpoints and the last commit
would win. So before it trains, the run that owns the output (the CLI's driver or in-process trainer,
rank 0 under torchrun/deepspeed) creates `<parent>/.<name>.lease` — atomically: O_CREAT|O_EXCL on a
local path, a conditional PUT (If-None-Match: *) on S3 — holding who it is, and rewrites it every
TTL/4 seconds (the heartbeat). A second writer finds it and stops with one line naming the holder
(LeaseHeld: exit 75, so a flow retries it later). A lease is taken over when its holder is dead:
on the same host, as soon as its process is gone (a kill -9 and an immediate retry); elsewhere, once
its heartbeat is older than the TTL (ALIGNFLOW_LEASE_TTL_S, default 60 s; hosts' clocks must agree to
within a fraction of it). The ranks a driver starts inherit its lease through ALIGNFLOW_LEASE.

Takeover on S3 is a delete then a conditional create: of two runs taking over one dead lease at the
same instant, both may proceed (the window is one round trip). S3-compatible servers that ignore
If-None-Match lose the atomic create; reading the lease back after writing it narrows, not closes,
that race.
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
from dataclasses import asdict, dataclass

from alignment import storage
from alignment.errors import TransientError

log = logging.getLogger(__name__)
ENV = "ALIGNFLOW_LEASE"


class LeaseHeld(TransientError):
    """Another live run holds the output's lease."""


_held: list["Lease"] = []  # this process's leases, released by release_all when a CLI's main returns


def release_all() -> None:
    while _held:
        _held.pop().release()


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class Holder:
    owner: str  # a random id per lease
    host: str
    boot: str  # the host's boot id: a pid means nothing after a reboot
    pid: int
    what: str  # the command that holds it
    heartbeat: float  # time.time() of the last heartbeat

    def describe(self) -> str:
        return f"{self.what} (pid {self.pid} on {self.host}, last heartbeat {time.time() - self.heartbeat:.0f} s ago)"

    def dead(self, ttl_s: float) -> bool:
        """Its heartbeat is older than the TTL, or (same host, same boot) its process is gone."""
        if time.time() - self.heartbeat > ttl_s:
            return True
        if self.host != socket.gethostname() or self.boot != _boot_id():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another user's
            pass
        return False


def lease_uri(output_uri: str) -> str:
    parent, _, name = output_uri.rstrip("/").rpartition("/")
    return f"{parent}/.{name}.lease" if parent else f".{name}.lease"


def ttl_s() -> float:
    return float(os.environ.get("ALIGNFLOW_LEASE_TTL_S", "60"))


def _read(uri: str) -> Holder | None:
    text = storage.read_text(uri)
    if text is None:
        return None
    try:
        return Holder(**json.loads(text))
    except (ValueError, TypeError):  # torn by a crash mid-write on a filesystem without atomic writes
        return Holder("?", "?", "", 0, "an unreadable lease", 0.0)


def _create(uri: str, holder: Holder) -> bool:
    """Write the lease only if there is none; False when one exists."""
    data = json.dumps(asdict(holder)).encode()
    fs, path = storage.filesystem(uri)
    if not storage.is_remote(uri):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return True
    try:  # the server's 412 PreconditionFailed: s3fs raises FileExistsError (AWS) or OSError EINVAL (SeaweedFS)
        storage.retry_call(lambda: fs.pipe_file(path, data, mode="create"), "create", uri)
    except storage.StorageError as e:
        cause = e.__cause__
        if (
            isinstance(cause, FileExistsError)
            or "pre-conditions you specified did not hold" in str(cause)
            or "PreconditionFailed" in str(cause)
        ):
            return False
        raise
    got = _read(uri)
    return got is not None and got.owner == holder.owner


class Lease:
    """The lease on one output, held from `acquire` until `release` (or the process ends)."""

    def __init__(self, output_uri: str, what: str):
        self.uri, self.output, self.what = lease_uri(output_uri), output_uri, what
        self.holder: Holder | None = None
        self._stop = threading.Event()

    def acquire(self) -> "Lease":
        inherited = os.environ.get(ENV)
        for _ in range(5):
            mine = Holder(uuid.uuid4().hex, socket.gethostname(), _boot_id(), os.getpid(), self.what, time.time())
            if _create(self.uri, mine):
                self.holder = mine
                os.environ[ENV] = mine.owner  # the ranks this process starts share it
                threading.Thread(target=self._beat, daemon=True, name="alignflow-lease").start()
                atexit.register(self.release)
                _held.append(self)
                return self
            found = _read(self.uri)
            if found is None:
                continue  # released in between: try again
            if inherited and found.owner == inherited:
                return self  # a rank of the run that holds it
            if not found.dead(ttl_s()):
                raise LeaseHeld(
                    f"{self.output} is being written by {found.describe()}; its lease is {self.uri}: "
                    f"wait for that run to end, or write to another path"
                )
            log.warning("taking over the lease on %s from %s, which is gone", self.output, found.describe())
            storage.remove(self.uri)
        raise LeaseHeld(f"{self.output}: could not take its lease {self.uri} (other writers keep taking it)")

    def _beat(self) -> None:
        while not self._stop.wait(ttl_s() / 4):
            try:
                found = _read(self.uri)
                if found is None or self.holder is None or found.owner != self.holder.owner:
                    log.error(
                        "lost the lease on %s (now held by %s): another run may be writing it",
                        self.output,
                        found.describe() if found else "nobody",
                    )
                    return
                self.holder = Holder(**{**asdict(self.holder), "heartbeat": time.time()})
                storage.write_text_atomic(self.uri, json.dumps(asdict(self.holder)))
            except storage.StorageError as e:  # a store outage: the run's own store calls will say so
                log.warning("lease heartbeat on %s failed: %s", self.output, e)

    def release(self) -> None:
        self._stop.set()
        if self.holder is None:
            return
        try:
            found = _read(self.uri)
            if found is not None and found.owner == self.holder.owner:
                storage.remove(self.uri)
        except storage.StorageError as e:
            log.warning("could not release the lease %s (%s); it expires by itself", self.uri, e)
        self.holder = None
