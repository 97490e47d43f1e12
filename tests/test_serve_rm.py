"""The reward server: request validation (pure), then real servers on loopback — one serving the
rule reward_func, one a trained RM — answering well-formed requests, refusing bad ones with a 4xx
and a reason while staying up, and serving PPO (`train_ppo --remote_rm_url http://...`)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from contextlib import contextmanager

import pytest

from alignment.cli.serve_rm import BadRequest, parse_request
from alignment.tiny_world.paths import tiny_dir
from tests.conftest import REPO, metric_rows, python_env, run_module
from tests.fixtures_s3 import stop_process


@pytest.mark.parametrize(
    "body, status, needle",
    [
        (b"{nope", 400, "not JSON"),
        (b'{"queries": []}', 400, "expected"),
        (b'{"query": [1]}', 400, "must be a string"),
        (b'{"query": ["a", "b"], "prompts": ["a"], "labels": [1, 2]}', 400, "same length"),
        (json.dumps({"query": ["q"] * 5}).encode(), 413, "at most 4"),
        (json.dumps({"query": ["q" * 50]}).encode(), 400, "over the server's --max_len 10"),
    ],
)
def test_bad_requests_are_refused_with_a_reason(body, status, needle):
    with pytest.raises(BadRequest, match=needle) as e:
        parse_request(body, max_batch=4, count_tokens=len, max_len=10)
    assert e.value.status == status


def test_a_good_request_defaults_prompts_and_labels():
    assert parse_request(b'{"query": ["a", "b"]}', 4, len, 10) == (["a", "b"], ["", ""], [None, None])


@contextmanager
def server(*args: str):
    proc = subprocess.Popen(
        [sys.executable, "-m", "alignment.cli.serve_rm", "--port", "0", *args],
        cwd=REPO,
        env=python_env(OMP_NUM_THREADS=1),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert "serving rewards from" in line, proc.stderr.read()[-2000:] if proc.poll() is not None else line
        yield line.rsplit(" on ", 1)[1].strip()
    finally:
        stop_process(proc)


def post(url: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.mark.integration
def test_rule_server_answers_refuses_and_serves_ppo(tiny_sft, tmp_path):
    with server(
        "--remote_rm_url", "alignment/tiny_world/reward.py", "--max_batch", "256", "--max_request_bytes", "100000"
    ) as url:
        ok = {"query": ["Q: 2+3\nA: 5", "Q: 2+3\nA: 6"], "prompts": ["Q: 2+3\n", "Q: 2+3\n"], "labels": ["5", "5"]}
        assert post(url, json.dumps(ok).encode()) == (200, {"rewards": [1.0, 0.0]})
        status, reply = post(url, b"{not json")
        assert status == 400 and "not JSON" in reply["error"]
        status, reply = post(url, json.dumps({"query": ["x" * 200_000]}).encode())
        assert status == 413 and "--max_request_bytes" in reply["error"]
        status, reply = post(url, json.dumps({"query": ["a"] * 300}).encode())
        assert status == 413 and "--max_batch" in reply["error"]
        with urllib.request.urlopen(url.replace("/get_reward", "/health"), timeout=10) as resp:
            assert json.loads(resp.read())["status"] == "ok"  # still up after the bad requests

        out = tmp_path / "ppo"
        run_module(
            "alignment.cli.train_ppo",
            [
                "--pretrain",
                str(tiny_sft),
                "--save_path",
                str(out),
                "--remote_rm_url",
                url,
                "--prompt_data",
                f"json@{tiny_dir() / 'prompts'}",
                "--input_key",
                "context_messages",
                "--label_key",
                "label",
                "--apply_chat_template",
                "--generate_max_len",
                "16",
                "--advantage_estimator",
                "group_norm",
                "--n_samples_per_prompt",
                "4",
                "--rollout_batch_size",
                "16",
                "--micro_rollout_batch_size",
                "64",
                "--train_batch_size",
                "64",
                "--micro_train_batch_size",
                "16",
                "--max_samples",
                "32",
                "--logging_steps",
                "1",
            ],
        )
        rows = metric_rows(out)
        assert len(rows) == 2 and all(0.3 < r["train/reward"] <= 1.0 for r in rows)  # the SFT model is ~70 % right


@pytest.mark.integration
def test_reward_model_server(tiny_rm):
    """A served RM (packed, as OpenRLHF's serve_rm line asks with --ds.packing_samples) scores as padded scoring
    does, for queries of other lengths in one batch; a query over --max_len is refused."""
    import torch

    from alignment.models.loading import load_tokenizer
    from alignment.rewards.scorer import RewardModels

    tok = load_tokenizer(str(tiny_rm))
    texts = [
        f"<|user|>\nWhat is {a} + {b}?<|end|>\n<|assistant|>\n{a} + {b} = {a + b}<|end|>\n"
        for a, b in [(2, 3), (17, 25), (4, 9)]
    ]
    texts.append("<|user|>\nWhat is 9 + 9?<|end|>\n<|assistant|>\n" + "9 + 9 = 18. " * 4 + "<|end|>\n")
    padded = RewardModels([str(tiny_rm)], [1.0], tok, torch.float32, "sdpa", "cpu", False)(texts, texts, [None] * 4)
    packed = RewardModels([str(tiny_rm)], [1.0], tok, torch.float32, "sdpa", "cpu", False, pack_tokens=64)
    assert torch.allclose(packed(texts, texts, [None] * 4).rewards, padded.rewards, atol=1e-5)
    with server("--reward_pretrain", str(tiny_rm), "--data.max_len", "64", "--ds.packing_samples") as url:
        queries = ["<|user|>\nWhat is 2 + 3?<|end|>\n<|assistant|>\n2 + 3 = 5<|end|>\n"] * 3
        status, reply = post(url, json.dumps({"query": queries}).encode())
        assert status == 200 and len(reply["rewards"]) == 3
        assert max(reply["rewards"]) - min(reply["rewards"]) < 1e-4  # one query, one score (any batch row)
        status, reply = post(url, json.dumps({"query": ["1 + 1 = 2 " * 40]}).encode())
        assert status == 400 and "--max_len 64" in reply["error"]
