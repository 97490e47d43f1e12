"""Slow reward sources overlap their waits: an `async def reward_func` is awaited once per sample, many at once,
and a reward server gets several batches at once (alignment/rewards/reward_func.py, remote.py); answers stay
in the samples' order."""

from __future__ import annotations

import json
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from alignment.rewards import reward_func as rf
from alignment.rewards.remote import RemoteRewardClient

ASYNC_FILE = textwrap.dedent("""
    import asyncio

    in_flight, most = 0, 0

    async def reward_func(queries, prompts, labels):
        global in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.05)          # an API call
        in_flight -= 1
        if labels[0] == "boom":
            raise ValueError("the judge is down")
        return {"rewards": [float(len(q)) for q in queries], "extra_logs": {"calls": 1.0}}
""")


def test_an_async_reward_func_is_awaited_per_sample_up_to_the_limit(tmp_path):
    (tmp_path / "judge.py").write_text(ASYNC_FILE)
    fn = rf.load_reward_func(str(tmp_path / "judge.py"))
    queries = ["x" * k for k in range(40)]
    out = fn(queries, queries, [None] * 40)
    assert out.rewards == [float(k) for k in range(40)] and out.logs == {"calls": 1.0}
    assert fn.fn.__globals__["most"] == rf.IN_FLIGHT  # 32 awaited at once, not one after another
    with pytest.raises(ValueError, match="the judge is down"):  # FunctionReward turns it into one line
        fn(["a"], ["a"], ["boom"])


def test_a_reward_server_gets_several_batches_at_once():
    state = {"now": 0, "most": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                state["now"] += 1
                state["most"] = max(state["most"], state["now"])
            time.sleep(0.3)  # a busy server
            with lock:
                state["now"] -= 1
            reply = json.dumps({"rewards": [float(len(q)) for q in body["query"]]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = RemoteRewardClient([f"http://127.0.0.1:{server.server_port}/get_reward"], batch_size=4)
        queries = ["y" * k for k in range(16)]
        out = client(queries, queries, [None] * 16)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert out.rewards == [float(k) for k in range(16)]
    assert state["most"] == 4  # the four batches were in flight together
