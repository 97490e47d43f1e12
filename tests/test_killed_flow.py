"""A killed flow leaves nothing running, and the same flow run again finishes
(alignflow/tasks/cluster/head_watchdog.py, alignflow/tasks/orchestration/output_slot.py): kill -9 of the demo's flow
process mid-SFT; soon after, no process of its embedded Ray head, of its job or that the flow had started (the
ephemeral Prefect API) is alive (the watchdog takes a second or two; the test allows a minute, since how fast is a
benchmark's question and a loaded 2-core CI machine once took more than 10 s); the rerun takes the dead run's
output slot over at once and resumes SFT from its checkpoint."""

from __future__ import annotations

import subprocess
import time

import psutil
import pytest

from alignflow.tasks.cluster.head_watchdog import head_processes
from tests.conftest import python_env
from tests.test_interrupts import short_demo, wait_for

pytestmark = pytest.mark.chaos


def watchdog_of(pid: int) -> psutil.Process:
    """The head watchdog the flow process `pid` started (its first argument is that pid)."""
    for p in psutil.process_iter(["cmdline"]):
        args = p.info["cmdline"] or []
        if "alignflow.tasks.cluster.head_watchdog" in args and args[
            args.index("alignflow.tasks.cluster.head_watchdog") + 1
        ] == str(pid):
            return p
    raise AssertionError(f"no head watchdog of {pid}")


def test_kill9_of_the_flow_process_stops_its_ray_head_and_the_rerun_finishes(tmp_path):
    root = tmp_path / "demo"
    cmd = short_demo(root)
    env = python_env(PREFECT_HOME=str(tmp_path / "prefect"))
    env.pop("PREFECT_API_URL", None)  # the demo's own ephemeral API, as on a user's machine
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: next((root / "store" / "demo").glob("sft-*/checkpoints/latest"), None), proc, timeout_s=600)
        dog = watchdog_of(proc.pid)
        temp_dir, gcs_port = dog.cmdline()[-2], int(dog.cmdline()[-1])
        running = {
            p.pid: p for p in [*psutil.Process(proc.pid).children(recursive=True), *head_processes(temp_dir, gcs_port)]
        }
        assert len(running) >= 5, running  # the head's daemons, the job's driver and rank, the API server
    finally:
        proc.kill()
        proc.wait()
    killed, deadline = time.monotonic(), time.monotonic() + 60
    while (alive := [p for p in running.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.5)
    assert not alive, (time.monotonic() - killed, [(p.pid, p.cmdline()[:3]) for p in alive])
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    shown = again.stdout + again.stderr
    assert again.returncode == 0, shown[-4000:]
    assert "which is gone: freeing it" in shown and "resuming stage sft from committed checkpoint" in shown, shown[
        -4000:
    ]
