"""The embedded head's exposure: every port it opens is on loopback, and it runs with a per-process
random token (without it any local user, or anyone reaching a multi-node head, could join and run
code); a user's cluster that wants a token is one clear line instead of "unreachable"."""

from __future__ import annotations

import http.server
import ipaddress
import re
import subprocess
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from alignflow.tasks.cluster import ray_auth, ray_cluster
from alignflow.tasks.cluster.head_watchdog import head_processes
from alignflow.tasks.cluster.ray_cluster import RayClusterError, check_reachable


def test_embedded_head_uses_a_random_token_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    env = ray_cluster._head_env()
    assert env["RAY_AUTH_MODE"] == "token" and len(env["RAY_AUTH_TOKEN"]) == 64
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the user's choice stands
    assert ray_cluster._head_env()["RAY_AUTH_MODE"] == "disabled" and "RAY_AUTH_TOKEN" not in ray_cluster._head_env()


@pytest.mark.integration
def test_embedded_head_refuses_whoever_lacks_its_token(ray_head, tmp_path):
    """From outside (no token): the job API answers 401 and joining the cluster's GCS as a driver
    fails; with the token (this process) jobs run. The listeners are printed for the record."""
    import json
    import os
    import re
    import subprocess
    import sys
    import time
    import urllib.error
    import urllib.request

    import psutil
    from ray.job_submission import JobSubmissionClient

    with pytest.raises(urllib.error.HTTPError, match="401"):
        urllib.request.urlopen(f"{ray_head}/api/version", timeout=10)
    client = JobSubmissionClient(ray_head)
    sid = client.submit_job(
        entrypoint=f"{sys.executable} -c \"import ray; ray.init(); "
        "print('GCS=' + ray.get_runtime_context().gcs_address)\""
    )
    while not client.get_job_status(sid).is_terminal():
        time.sleep(0.5)
    found = re.search(r"GCS=([\d.]+:\d+)", client.get_job_logs(sid))
    assert found, (client.get_job_status(sid), client.get_job_logs(sid)[-2000:])
    gcs = found.group(1)
    # Ray's client would dial the host's address for 127.0.0.1 (where the head no longer listens):
    # the outsider turns that off too, and so reaches the GCS on loopback
    outsider = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")} | {
        "HOME": str(tmp_path),
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    }
    probe = subprocess.run(
        [sys.executable, "-c", f"import ray; ray.init(address={gcs!r}); print('JOINED')"],
        env=outsider,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode != 0 and "JOINED" not in probe.stdout, (probe.stdout, probe.stderr[-2000:])
    assert "auth" in probe.stderr.lower() or "token" in probe.stderr.lower(), probe.stderr[-2000:]
    open_ports = sorted(
        {
            (c.laddr.ip, c.laddr.port)
            for c in psutil.net_connections("inet")
            if c.status == "LISTEN" and c.laddr.ip not in ("127.0.0.1", "::1", "::ffff:127.0.0.1")
        }
    )
    print(json.dumps({"gcs": gcs, "non_loopback_listeners_on_host": len(open_ports)}))


def listeners() -> list[tuple[str, int, set[int]]]:
    """Every listening TCP socket of the machine as `ss -ltnpH` shows it: (host, port, PIDs); the PIDs
    only for our own processes."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        local = line.split()[3]  # 127.0.0.1:52803, [::ffff:127.0.0.1]:43341, *:53153
        host, port = local.rsplit(":", 1)
        found.append((host.strip("[]").split("%")[0], int(port), {int(p) for p in re.findall(r"pid=(\d+)", line)}))
    return found


def is_loopback(host: str) -> bool:
    if host in ("*", "0.0.0.0", "::"):
        return False
    ip = ipaddress.ip_address(host)
    return ip.is_loopback or bool(ip.version == 6 and ip.ipv4_mapped and ip.ipv4_mapped.is_loopback)


def embedded_head_pids(url: str) -> set[int]:
    """The head's processes, found from the one serving its job API (its command line names the
    head's private temp dir and GCS address)."""
    port = urlsplit(url).port
    dashboard = next(pid for _, p, pids in listeners() if p == port for pid in pids)
    import psutil

    args = psutil.Process(dashboard).cmdline()
    temp_dir = next(m.group(1) for a in args if (m := re.search(r"(/\S*?alignflow-ray-[^/\s]+)", a)))
    gcs_port = int(next(a for a in args if a.startswith("--gcs-address=")).rsplit(":", 1)[1])
    return {p.pid for p in head_processes(Path(temp_dir), gcs_port)}


@pytest.mark.integration
def test_every_port_of_the_embedded_head_is_on_loopback(ray_head):
    """GCS, raylet, agents, dashboard, metrics servers, and a job's supervisor, driver and worker:
    none listens on the host's address or on a wildcard (Ray 2.60 puts many there by default)."""
    import json
    import sys
    import time

    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(ray_head)
    sid = client.submit_job(
        entrypoint=f"{sys.executable} -c \"import ray, time; ray.init(); "
        "ray.get(ray.remote(lambda: 0).remote()); print('UP', flush=True); time.sleep(120)\""
    )
    try:
        deadline = time.monotonic() + 120
        while "UP" not in client.get_job_logs(sid):
            assert time.monotonic() < deadline and not client.get_job_status(sid).is_terminal(), client.get_job_logs(
                sid
            )
            time.sleep(0.5)
        pids = embedded_head_pids(ray_head)
        ours = [(host, port) for host, port, owners in listeners() if owners & pids]
    finally:
        client.stop_job(sid)
    exposed = [(host, port) for host, port in ours if not is_loopback(host)]
    print(json.dumps({"head_processes": len(pids), "listeners": len(ours), "non_loopback": exposed}))
    assert urlsplit(ray_head).port in {port for _, port in ours} and len(ours) >= 10, ours
    assert not exposed, exposed


def test_probes_carry_the_token_only_in_token_mode(monkeypatch, tmp_path):
    (tmp_path / "tok").write_text("abc123\n")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "tok"))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    assert ray_auth.auth_headers() == {}
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert ray_auth.auth_headers() == {"Authorization": "Bearer abc123"}
    monkeypatch.setenv("RAY_AUTH_TOKEN", "fromenv")
    assert ray_auth.auth_headers() == {"Authorization": "Bearer fromenv"}


class _Needs:
    """A loopback HTTP server that answers /api/version 401 unless the right bearer token comes."""

    def __init__(self, token: str):
        outer = self
        self.seen: list[str | None] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                outer.seen.append(self.headers.get("Authorization"))
                ok = self.headers.get("Authorization") == f"Bearer {token}"
                self.send_response(200 if ok else 401, None if ok else "Unauthorized")
                self.end_headers()
                self.wfile.write(b'{"version": "x"}' if ok else b"")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def token_cluster():
    srv = _Needs("s3cret")
    yield srv
    srv.server.shutdown()
    srv.server.server_close()


def test_a_cluster_wanting_a_token_is_one_clear_line(token_cluster, monkeypatch):
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    with pytest.raises(RayClusterError, match="wants an auth token .*set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN"):
        check_reachable(token_cluster.url)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "s3cret")
    assert check_reachable(token_cluster.url) == token_cluster.url
    assert token_cluster.seen == [None, "Bearer s3cret"]
