"""The Ray cluster a flow's stages run on: a given address, or a local head started for the flow.

The embedded head listens on loopback only (every port: GCS, raylet, agents, workers, dashboard and
job API, metrics), lives in a private temp dir, and is stopped when the flow ends — also when it fails.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

from ray.util.state import list_nodes

from alignflow.tasks.cluster import head_watchdog
from alignflow.tasks.cluster.ray_auth import auth_env, auth_headers, client_auth
from alignment.distributed.ports import free_port

log = logging.getLogger(__name__)


class RayClusterError(RuntimeError):
    """The Ray cluster can't be reached or started; the message says what to do."""


def _free_ports(n: int) -> list[int]:
    """n distinct free loopback ports below the kernel's ephemeral range (as a process group's port is
    chosen: alignment/distributed/ports.free_port), every socket bound until all are picked (one at a
    time, the same port could come twice: seen once as two Ray components on 42439). A port from the
    ephemeral range can become any outgoing connection's local port before Ray binds it: in CI (.ci/run
    of dd80360) a head's dashboard agent found 59105 taken so, and that head could not run a job."""
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        while len(ports) < n:
            s = stack.enter_context(socket.socket())
            try:
                s.bind(("127.0.0.1", free_port("127.0.0.1")))
            except OSError:  # taken between the check and this bind: pick another
                continue
            ports.append(s.getsockname()[1])
        return ports


def _head_env(single_node: bool = True) -> dict[str, str]:
    """Environment of the `ray start` processes of a local head (jobs and ranks inherit it).

    Ray 2.60 turns `--node-ip-address 127.0.0.1` into the host's address (a node must be reachable
    by others), and then its GCS, raylet, agents, workers and metrics servers (the agent's metrics
    export, the dashboard's and autoscaler's on 44227/44217) listen on it or on every interface.
    With multi-node clusters off (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, Ray's switch for platforms
    where it doesn't support them) the node's address stays 127.0.0.1 and each of them binds
    loopback. Ray then refuses `ray start --address`, so a head that nodes join keeps it on."""
    loopback = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"} if single_node else {}
    return {**QUIET_LOG_MONITOR, **os.environ, "RAY_USAGE_STATS_ENABLED": "0", **auth_env(), **loopback}


# Ray's log monitor (it forwards the workers' lines to the job's log) looks for new log files with a glob on every
# 0.1 s pass until a node has 1,000 of them. A head that ran many jobs has hundreds: with 400, that took 9 % of a
# core while idle, 3.6 % with the look once a second (new files are still read from their first line, up to a
# second later). The environment can set either.
QUIET_LOG_MONITOR = {"RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0", "LOG_NAME_UPDATE_INTERVAL_S": "1"}


def _get_version(url: str, timeout_s: float) -> None:
    with urllib.request.urlopen(
        urllib.request.Request(f"{url}/api/version", headers=auth_headers()), timeout=timeout_s
    ) as r:
        r.read()


def _ray_bin() -> str:
    local = Path(sys.executable).parent / "ray"
    return str(local) if local.exists() else (shutil.which("ray") or "ray")


def check_reachable(address: str, timeout_s: float = 10.0) -> str:
    """The job API's HTTP address, after checking it answers (fails fast with a clear message)."""
    url = address if address.startswith("http") else f"http://{address}"
    if url.count(":") < 2:
        url += ":8265"
    try:
        _get_version(url, timeout_s)
    except urllib.error.HTTPError as e:
        if e.code == 401:
            raise RayClusterError(
                f"Ray cluster at {url} wants an auth token ({e.reason}); set RAY_AUTH_MODE=token and "
                f"RAY_AUTH_TOKEN (or ~/.ray/auth_token) to the cluster's token"
            ) from None
        raise RayClusterError(
            f"Ray cluster at {url} answered HTTP {e.code} ({e.reason}) at /api/version; "
            f"pass its dashboard address (http://HOST:8265)"
        ) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise RayClusterError(
            f"Ray cluster at {url} is unreachable ({reason}); start one with `ray start --head "
            f"--dashboard-host 0.0.0.0` and pass its dashboard address (http://HOST:8265), "
            f"or pass no ray_address to run on a local head"
        ) from None
    return url


def _wait_for_dashboard(url: str, proc_log: Path, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            _get_version(url, 2)
            return
        except urllib.error.HTTPError as e:  # it answers, but refuses: waiting longer won't help
            raise RayClusterError(
                f"local Ray head at {url} answered HTTP {e.code} ({e.reason}); log: {proc_log}"
            ) from None
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    raise RayClusterError(f"local Ray head did not answer at {url} within {timeout_s:.0f}s; log: {proc_log}")


NODE_PORTS = (
    "node-manager-port",
    "object-manager-port",
    "runtime-env-agent-port",
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "metrics-export-port",
)


@contextlib.contextmanager
def local_head(num_cpus: int | None = None, extra_nodes: int = 0) -> Iterator[str]:
    """Start `ray start --head` on loopback; yield its job API address; `ray stop` at exit.
    `extra_nodes` more raylets (`ray start --address`, `num_cpus` each) join it: a multi-node
    cluster on one machine, for testing placement across nodes."""
    temp_dir = Path(tempfile.mkdtemp(prefix="alignflow-ray-"))
    # Every port is chosen free, none left at Ray's fixed defaults (10001, 52365, ...): a second
    # cluster on the machine (a user's, or a test's) then can't make our job agent fail to start.
    names = ("port", "dashboard-port", "ray-client-server-port", *NODE_PORTS)
    ports = dict(zip(names, _free_ports(len(names))))
    url = f"http://127.0.0.1:{ports['dashboard-port']}"
    cmd = [
        _ray_bin(),
        "start",
        "--head",
        "--node-ip-address=127.0.0.1",
        "--dashboard-host=127.0.0.1",
        "--include-dashboard=true",
        *[f"--{k}={v}" for k, v in ports.items()],
        f"--num-cpus={num_cpus or os.cpu_count() or 1}",
        f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
    ]
    out = temp_dir / "ray_start.log"
    log.info("starting a local Ray head on 127.0.0.1 (job API %s, token auth, temp dir %s)", url, temp_dir)
    with client_auth(), out.open("w") as f:
        # started in its private dir: jobs run there, not in whatever directory the flow was started from
        done = subprocess.run(
            cmd, stdout=f, stderr=subprocess.STDOUT, env=_head_env(single_node=not extra_nodes), cwd=temp_dir
        )
    # stops the head if this process dies without running the `finally` below (kill -9, OOM)
    watchdog = head_watchdog.start(temp_dir, ports["port"])
    with client_auth():
        try:
            if done.returncode != 0:
                raise RayClusterError(f"`ray start --head` failed (exit {done.returncode}): {out.read_text()[-800:]}")
            _wait_for_dashboard(url, out)
            for i in range(extra_nodes):
                _join_node(f"127.0.0.1:{ports['port']}", num_cpus or 1, temp_dir / f"ray_start_node{i + 1}.log")
            if extra_nodes:
                _wait_for_nodes(url, 1 + extra_nodes)
            yield url
        finally:
            watchdog.terminate()
            watchdog.wait()
            stopped = head_watchdog.stop_head(temp_dir, ports["port"])
            shutil.rmtree(temp_dir, ignore_errors=True)
            log.info("local Ray head stopped (%d processes)", stopped)


def _join_node(gcs_address: str, num_cpus: int, proc_log: Path) -> None:
    cmd = [
        _ray_bin(),
        "start",
        f"--address={gcs_address}",
        "--node-ip-address=127.0.0.1",
        f"--num-cpus={num_cpus}",
        *[f"--{k}={p}" for k, p in zip(NODE_PORTS, _free_ports(len(NODE_PORTS)))],
        "--disable-usage-stats",
    ]
    with proc_log.open("w") as f:
        done = subprocess.run(
            cmd, stdout=f, stderr=subprocess.STDOUT, env=_head_env(single_node=False), cwd=proc_log.parent
        )
    if done.returncode != 0:
        raise RayClusterError(
            f"`ray start --address {gcs_address}` failed (exit {done.returncode}): {proc_log.read_text()[-800:]}"
        )


def _wait_for_nodes(url: str, n: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(list_nodes(address=url, filters=[("state", "=", "ALIVE")])) >= n:
            return
        time.sleep(0.5)
    raise RayClusterError(f"the local Ray cluster at {url} did not reach {n} nodes within {timeout_s:.0f}s")


class Cluster:
    """A flow's Ray cluster: the given one, or an embedded head started the first time a stage needs
    it (`address`), so a flow whose stages are all committed starts none."""

    def __init__(self, stack: contextlib.ExitStack, address: str | None, num_cpus: int | None):
        self._stack, self._address, self._num_cpus = stack, address, num_cpus

    @property
    def address(self) -> str:
        if self._address is None:
            self._address = self._stack.enter_context(local_head(self._num_cpus))
        return self._address


@contextlib.contextmanager
def ray_cluster(address: str | None, num_cpus: int | None = None) -> Iterator[Cluster]:
    """The given cluster (checked now) or an embedded local head, started on first use and stopped
    at the end of the block."""
    with contextlib.ExitStack() as stack:
        yield Cluster(stack, check_reachable(address) if address else None, num_cpus)
