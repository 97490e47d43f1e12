"""Reward sources for RL: a reward_func file and reward servers over real HTTP on loopback."""

from __future__ import annotations

import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import alignment.tiny_world.reward as tiny_reward
from alignment.rewards.remote import RemoteRewardClient
from alignment.rewards.reward_func import RewardError, RewardServerDown, check_rewards, load_reward_func

PROMPTS = ["<|user|>What is 2 + 3?<|end|><|assistant|>", "<|user|>What is 4 * 5?<|end|><|assistant|>"]
QUERIES = [PROMPTS[0] + "2 + 3 = 5<|end|>", PROMPTS[1] + "4 * 5 = 21<|end|>"]
LABELS = ["5", "20"]


class Handler(BaseHTTPRequestHandler):
    """Modes set per test through the server object: ok, malformed, short, flaky (one 500 first)."""

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server = self.server
        server.requests.append(body)
        if server.mode == "flaky" and len(server.requests) == 1:
            return self._send(500, b"warming up")
        if server.mode == "malformed":
            return self._send(200, b"<html>not json</html>")
        rewards = tiny_reward.reward_func(body["query"], body["prompts"], body["labels"])
        if server.mode == "short":
            rewards = rewards[:-1]
        self._send(200, json.dumps({"rewards": rewards}).encode())

    def _send(self, code: int, payload: bytes):
        self.send_response(code)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.mode, srv.requests = "ok", []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join()


def url(srv) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}/get_reward"


def test_reward_func_file_is_the_tiny_rule():
    fn = load_reward_func(tiny_reward.__file__)
    assert fn(QUERIES, PROMPTS, LABELS) == [1.0, 0.0]


def test_smol_reward_func_counts_the_replys_first_number():
    """data/smol/reward_func.py scores as `make demo-smol` counts a held-out answer: the reply's first number."""
    from tests.conftest import REPO

    fn = load_reward_func(str(REPO / "data" / "smol" / "reward_func.py"))
    prompt = "<|im_start|>user\nWhat is 25 + 73? Answer with the number only.<|im_end|>\n<|im_start|>assistant\n"
    replies = ["98<|im_end|>", "It is 98, not 97", "97 or 98", "<|im_end|>98", "ninety-eight"]
    assert fn([prompt + r for r in replies], [prompt] * 5, ["98"] * 5).tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="does not start with its prompt"):
        fn(["98"], [prompt], ["98"])


def test_smol_rm_pairs_differ_only_in_the_sum_on_sums_rl_and_the_test_never_see():
    """data/smol/rm (scripts/make_smol_data.py): the reward model of sft-rm-ppo learns from bare answers, the right
    sum against a wrong one (a dropped carry among them), so it must check the sum; none of its questions is a
    held-out one or an RL prompt, so neither the accuracy nor the policy's prompts were seen by the RM."""
    import json
    import re

    from tests.conftest import REPO

    smol = REPO / "data" / "smol"

    def rows(path):
        return [json.loads(line) for line in (smol / path).read_text().splitlines()]

    def question(messages):
        return messages[0]["content"]

    pairs = rows("rm/train.jsonl") + rows("rm/test.jsonl")
    assert len(pairs) == 2048 + 128
    dropped_carry = 0
    for p in pairs:
        a, b = map(int, re.findall(r"\d+", question(p["chosen"])))
        right, wrong = int(p["chosen"][1]["content"]), int(p["rejected"][1]["content"])
        assert p["chosen"][0] == p["rejected"][0] and right == a + b and wrong != right
        dropped_carry += a % 10 + b % 10 >= 10 and wrong == right - 10
    assert dropped_carry > 100
    others = rows("prompts/test.jsonl") + rows("rl_prompts/train.jsonl")
    assert not {question(p["chosen"]) for p in pairs} & {question(r["context_messages"]) for r in others}


def test_reward_func_file_errors(tmp_path):
    with pytest.raises(RewardError, match="no such file"):
        load_reward_func(str(tmp_path / "missing.py"))
    (tmp_path / "r.py").write_text("def other():\n    pass\n")
    with pytest.raises(RewardError, match="defines no reward_func"):
        load_reward_func(str(tmp_path / "r.py"))


def test_server_batches_and_round_robins(server):
    client = RemoteRewardClient.from_flag(f"{url(server)},{url(server)}", batch_size=1)
    assert client(QUERIES, PROMPTS, LABELS).rewards == [1.0, 0.0]
    assert [len(r["query"]) for r in server.requests] == [1, 1]


def test_server_5xx_is_retried(server):
    server.mode = "flaky"
    assert RemoteRewardClient.from_flag(url(server), backoff_s=0.01)(QUERIES, PROMPTS, LABELS).rewards == [1.0, 0.0]
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    "mode, needle",
    [("malformed", "sent a malformed reply (expected JSON with 'rewards')"), ("short", "expected 2 rewards, got 1")],
)
def test_bad_replies_are_clear_errors(server, mode, needle):
    server.mode = mode
    with pytest.raises(RewardError) as err:
        RemoteRewardClient.from_flag(url(server))(QUERIES, PROMPTS, LABELS)
    assert needle in str(err.value) and url(server) in str(err.value)


def test_unreachable_server_says_so():
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = RemoteRewardClient.from_flag(f"http://127.0.0.1:{port}/get_reward", retries=1, backoff_s=0.01, timeout_s=2)
    with pytest.raises(RewardServerDown, match=f"127.0.0.1:{port}/get_reward unreachable after 2 tries"):
        client(QUERIES, PROMPTS, LABELS)


def test_check_rewards_and_flag_parsing():
    assert check_rewards([1, 0.5], 2, "x") == [1.0, 0.5]
    for bad in ([float("nan"), 1.0], ["1", 2.0], [True, 1.0]):
        with pytest.raises(RewardError, match="must be a finite number"):
            check_rewards(bad, 2, "x")
    with pytest.raises(RewardError, match="give http"):
        RemoteRewardClient.from_flag("ftp://host/x")


def test_reward_func_answers_as_openrlhf_writes_them():
    """OpenRLHF >= 0.8: a dict of rewards, scores and extra_logs (tensors or lists); older files: a plain list."""
    import torch

    from alignment.rewards.reward_func import merge_outputs, parse_output

    out = parse_output(
        {
            "rewards": torch.tensor([1.0, 0.0]),
            "scores": [1, 1],
            "extra_logs": {"len": torch.tensor([3.0, 5.0]), "batch": 2},
        },
        2,
        "f.py",
    )
    assert (out.rewards, out.scores, out.logs) == ([1.0, 0.0], [1.0, 1.0], {"len": 4.0, "batch": 2.0})
    assert parse_output({"rewards": [0.5, 0.5]}, 2, "f.py").scores == [0.5, 0.5]  # scores default to rewards
    assert parse_output(torch.tensor([0.5, 1.0]), 2, "f.py").rewards == [0.5, 1.0]
    merged = merge_outputs(
        [
            parse_output({"rewards": [1.0], "extra_logs": {"x": [2.0]}}, 1, "a"),
            parse_output({"rewards": [0.0, 0.0], "extra_logs": {"x": [5.0, 5.0]}}, 2, "b"),
        ]
    )
    assert merged.rewards == [1.0, 0.0, 0.0] and merged.logs == {"x": 4.0}
    for bad, needle in [
        ({"scores": [1.0, 1.0]}, "needs 'rewards'"),
        ({"rewards": [1.0, 1.0], "extra": 1}, "got keys"),
        ({"rewards": [1.0]}, "['rewards']: expected 2 rewards, got 1"),
        ({"rewards": [1.0, 1.0], "extra_logs": {"x": [1.0, 2.0, 3.0]}}, "extra_logs['x'] has 3 values"),
        ({"rewards": [1.0, float("nan")]}, "reward 1 is nan"),
    ]:
        with pytest.raises(RewardError, match=re.escape(needle)):
            parse_output(bad, 2, "f.py")


def test_reward_func_signature_is_checked_at_load(tmp_path):
    (tmp_path / "one.py").write_text("def reward_func(queries):\n    return []\n")
    with pytest.raises(
        RewardError,
        match=re.escape(
            "reward_func(queries) cannot be called as reward_func(queries, "
            "prompts, labels); define it as reward_func(queries, prompts, "
            "labels, **kwargs)"
        ),
    ):
        load_reward_func(str(tmp_path / "one.py"))
    (tmp_path / "kw.py").write_text("def reward_func(queries, prompts, labels, **kwargs):\n    return []\n")
    assert load_reward_func(str(tmp_path / "kw.py"))([], [], []) == []


MID_RUN_BUG = '''
def reward_func(queries, prompts, labels):
    if all(q == p for q, p in zip(queries, prompts)):  # the start-up check: empty responses
        return [0.0] * len(queries)
    return [{"5": 1.0}[label] for label in labels]  # a lookup that misses the run's labels
'''


def test_a_reward_file_that_raises_mid_run_is_one_line(tmp_path):
    """A reward file that passes the start-up check (alignment/cli/preflight.py) and raises on a later batch:
    one RewardError line naming the file, the call, the batch and the exception (exit 2 through run_main),
    not a KeyError traceback from FunctionReward.__call__ (exit 1, retried by a flow as a crash)."""
    from alignment.rewards.scorer import FunctionReward

    (tmp_path / "bug.py").write_text(MID_RUN_BUG)
    reward = FunctionReward(str(tmp_path / "bug.py"))
    assert reward(PROMPTS, PROMPTS, LABELS).rewards.tolist() == [0.0, 0.0]
    assert reward(QUERIES[:1], PROMPTS[:1], LABELS[:1]).rewards.tolist() == [1.0]
    with pytest.raises(RewardError) as err:
        reward(QUERIES, PROMPTS, LABELS)
    assert str(err.value) == (
        f"--remote_rm_url {tmp_path / 'bug.py'}: reward_func raised KeyError: '20' on call 3 (2 samples; labels "
        f"['5', '20']); it must score every response it is given (the start-up check passed): fix the file, then "
        f"rerun with --load_checkpoint to resume"
    )


@pytest.mark.integration
def test_a_reward_file_that_raises_mid_run_ends_train_ppo_in_one_line(tiny_base, tmp_path):
    """The same through `python -m alignment.cli.train_ppo`: exit 2, the one line last, no traceback."""
    import subprocess
    import sys

    from alignment.tiny_world.paths import tiny_dir
    from tests.conftest import python_env

    (tmp_path / "bug.py").write_text(MID_RUN_BUG)
    args = ["--pretrain", str(tiny_base), "--prompt_data", str(tiny_dir() / "prompts" / "train.jsonl")]
    args += ["--input_key", "input", "--label_key", "label", "--remote_rm_url", str(tmp_path / "bug.py")]
    args += ["--save_path", str(tmp_path / "out"), "--rollout_batch_size", "8", "--micro_rollout_batch_size", "8"]
    args += ["--train_batch_size", "8", "--micro_train_batch_size", "8", "--max_samples", "16"]
    args += ["--generate_max_len", "8", "--prompt_max_len", "32"]
    run = subprocess.run(
        [sys.executable, "-m", "alignment.cli.train_ppo", *args],
        cwd=tmp_path,
        env=python_env(OMP_NUM_THREADS="2"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    last = [ln for ln in run.stderr.splitlines() if ln.strip()][-1]
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-3000:]
    assert last.startswith(f"error: --remote_rm_url {tmp_path / 'bug.py'}: reward_func raised KeyError: "), last
    assert " on call 1 (8 samples; labels [" in last and not (tmp_path / "out").exists()
