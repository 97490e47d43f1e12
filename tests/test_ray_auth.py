"""Ray token auth around our cluster probes: the embedded head runs without tokens even when
`~/.ray/auth_token` exists (Ray 2.60 would otherwise turn auth on and our probes get 401), and a
user's cluster that wants a token is one clear line instead of "unreachable"."""
from __future__ import annotations

import http.server
import threading

import pytest

from alignflow.tasks import ray_cluster
from alignflow.tasks.ray_cluster import RayClusterError, check_reachable


def test_embedded_head_disables_token_auth_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    assert ray_cluster._head_env()["RAY_AUTH_MODE"] == "disabled"
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert ray_cluster._head_env()["RAY_AUTH_MODE"] == "token"


def test_probes_carry_the_token_only_in_token_mode(monkeypatch, tmp_path):
    (tmp_path / "tok").write_text("abc123\n")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "tok"))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    assert ray_cluster._auth_headers() == {}
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert ray_cluster._auth_headers() == {"Authorization": "Bearer abc123"}
    monkeypatch.setenv("RAY_AUTH_TOKEN", "fromenv")
    assert ray_cluster._auth_headers() == {"Authorization": "Bearer fromenv"}


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
