"""Ray token auth for the embedded head and for this process's calls to any head: the token a head
is started with, the environment a client needs to talk to it, and the bearer header of HTTP probes."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import Iterator

from ray._raylet import AuthenticationTokenLoader, Config

EMBEDDED_TOKEN = secrets.token_hex(32)


def auth_env() -> dict[str, str]:
    """Token auth for an embedded head: a multi-node one listens on the host's address (see
    ray_cluster._head_env), and without auth anyone who can reach the machine could join the
    cluster and run code; a loopback one is still open to every local user. So the embedded head runs with Ray's
    token auth, with a random token made per process (Ray caches the token a process has read),
    unless the user chose a mode with RAY_AUTH_MODE (then their token is used)."""
    if os.environ.get("RAY_AUTH_MODE"):
        return {}
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": EMBEDDED_TOKEN}


@contextlib.contextmanager
def client_auth() -> Iterator[None]:
    """This process talks to the embedded head with its token (Ray's clients read it from the
    environment); the previous environment is back afterwards."""
    added = auth_env()
    before = {k: os.environ.get(k) for k in added}
    os.environ.update(added)
    reload_ray_auth()
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        reload_ray_auth()


def reload_ray_auth() -> None:
    """Ray reads the auth mode and token once per process and caches them; make it read them again
    (what Ray's own ray.init does after turning token auth on)."""

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def auth_headers() -> dict[str, str]:
    """The bearer token for a cluster with token auth (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or
    ~/.ray/auth_token, Ray's own lookup order); none when RAY_AUTH_MODE is not `token`."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
        return {}
    token = os.environ.get("RAY_AUTH_TOKEN")
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    if not token and path.is_file():
        token = path.read_text().strip()
    return {"Authorization": f"Bearer {token}"} if token else {}
