"""The `whole_memory` lock (tests/memory_share.py): while a marked test runs, the other worker starts none."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.memory_share import memory_share

CHILD = """
import sys, time
from tests.memory_share import memory_share
with memory_share(exclusive=False):
    print(time.time(), flush=True)
"""


def test_a_test_of_the_other_worker_starts_only_after_the_exclusive_one_ends(monkeypatch, tmp_path):
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", f"unit-{tmp_path.name}")
    with memory_share(exclusive=True):
        child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)  # the child is blocked at the gate meanwhile
        released = time.time()
    started = float(child.communicate(timeout=60)[0])
    assert started >= released


def test_outside_xdist_there_is_no_lock(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)
    with memory_share(exclusive=True), memory_share(exclusive=True):  # would deadlock if it locked
        pass
