"""A closed rendezvous (alignment/distributed/rendezvous.py): a one-process run's torch store, and the vLLM
weight-sync group's, listen on the address they were given, never on every interface."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO, python_env

PROBE = """
import json, psutil, torch
from alignment.distributed.runtime import init_runtime
from alignment.rollout.collective_sync import listen
init_runtime()
t = torch.ones(1); torch.distributed.all_reduce(t)
store = listen("127.0.0.1", 2)
listening = [c.laddr for c in psutil.Process().net_connections("inet") if c.status == "LISTEN"]
print(json.dumps([[a.ip, a.port] for a in listening]))
"""


def test_a_one_process_run_listens_on_loopback_alone():
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], env=python_env(OMP_NUM_THREADS="1"), cwd=REPO, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    listening = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(listening) >= 2, listening  # torch's store and the sync group's (gloo's own, where it listens)
    assert all(ip == "127.0.0.1" for ip, _ in listening), listening  # no 0.0.0.0 / :: wildcard


def test_torchrun_agent_store_is_said_once_by_rank_zero():
    from alignment.distributed.rendezvous import agent_store_warning

    agent = {"TORCHELASTIC_USE_AGENT_STORE": "True", "MASTER_PORT": "29500"}
    assert "every interface (port 29500" in agent_store_warning({**agent, "RANK": "0"})
    assert agent_store_warning({**agent, "RANK": "1"}) is None  # once a run, not once a rank
    assert agent_store_warning({"RANK": "0", "MASTER_PORT": "29500"}) is None  # our own store: MASTER_ADDR alone
