"""Streaming agent episodes (--agent_batch_linger_ms, alignment/agents/llm.py) against lock-step turns, on the real
tiny model: a slow environment step holds only its own episode."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.agent_files import run_episodes

# three turns an episode; the first episode built waits SLOW_S on each step, the others not at all. Each
# episode appends (its number, when it ended) to LOG.
SLOW_ENV = textwrap.dedent("""
    import asyncio, itertools, json, time
    from alignment.agents import AgentInstanceBase

    COUNT = itertools.count()

    class AgentInstance(AgentInstanceBase):
        def __init__(self, *args, **kwargs):
            self.number, self.turn = next(COUNT), 0

        async def step(self, states, **kwargs):
            self.turn += 1
            if self.number == 0:
                await asyncio.sleep(SLOW_S)
            done = self.turn == 3
            if done:
                with open(LOG, "a") as f:
                    f.write(json.dumps([self.number, time.monotonic()]) + "\\n")
            feedback = "" if done else "\\n<|user|>\\nmore<|end|>\\n"
            return {"rewards": 0.0, "done": done, "environment_feedback": feedback}
""")


@pytest.mark.parametrize("linger_s", [None, 0.02])
def test_streaming_episodes_do_not_wait_for_a_slow_environment(tiny_base, tmp_path, linger_s):
    """--agent_batch_linger_ms: lock-step turns (unset) hold every episode until the slow one's step returns;
    streaming lets the seven others finish all three turns while it is still in its first step."""
    log = tmp_path / "ended.jsonl"
    (tmp_path / "slow.py").write_text(SLOW_ENV.replace("SLOW_S", "1.5").replace("LOG", repr(str(log))))
    got = run_episodes(tiny_base, str(tmp_path / "slow.py"), n=8, linger_s=linger_s)
    assert got.metrics["agent/turns"] == 3 and len(got.rollout) == 8
    ended = dict(json.loads(line) for line in log.read_text().splitlines())
    others = [t for k, t in ended.items() if k != 0]
    if linger_s is None:  # lock-step: each of the slow episode's three steps held everyone's next turn
        assert min(others) > ended[0] - 2.0  # after its second step (it ends 1.5 s after its third began)
    else:  # the others were done before the slow episode's second step began
        assert max(others) < ended[0] - 3.0
        assert got.metrics["agent/engine_batches"] > 3  # its turns went in batches of their own


def test_an_episode_pool_trains_the_groups_that_finish_and_carries_the_slow_one(tiny_base, tmp_path):
    """--async_train with agents on the HF engine (alignment/agents/pool.py): an iteration trains on the first
    groups to finish; the slow one goes on while the trainer has the model and joins the next batch, at the
    staleness bound (--async_queue_size 1), where it is waited for."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from alignment.agents.pool import EpisodePool
    from alignment.agents.runner import AgentRunner, AgentSettings
    from alignment.datasets.prompts import PromptSample
    from alignment.rollout.hf_engine import HFEngine

    log = tmp_path / "ended.jsonl"
    (tmp_path / "slow.py").write_text(SLOW_ENV.replace("SLOW_S", "1.0").replace("LOG", repr(str(log))))
    tok = AutoTokenizer.from_pretrained(tiny_base)
    engine = HFEngine(AutoModelForCausalLM.from_pretrained(tiny_base).eval(), tok.eos_token_id, tok.pad_token_id)
    runner = AgentRunner(AgentSettings(str(tmp_path / "slow.py"), 5, 10.0, 200, 6, linger_s=0.02), tok)
    ids = tok("What is 2 + 3?", add_special_tokens=False)["input_ids"]
    prompt = {name: PromptSample("What is 2 + 3?", ids, name) for name in "abcdef"}
    pool = EpisodePool(runner, engine.generate, n=2, bound=1, seed=1)
    params = runner.params(1.0, 1.0, False)
    pool.submit([prompt["a"], prompt["b"]], params)  # iteration 0: episode 0 of group a is the slow one
    pool.submit([prompt["c"], prompt["d"]], params)  # iteration 1, in the pool ahead (--async_queue_size 1)
    first = pool.collect(want=2, version=0)
    trained = [p.label for p in first.prompts]  # the first two to finish (which two: timing); a goes on
    assert len(trained) == 2 and set(trained) < {"b", "c", "d"}
    assert first.rollout.versions == [0] * 4 and first.rollout.prompt_index == [0, 0, 1, 1]
    assert first.metrics["agent/groups_in_flight"] == 2 and not log.read_text().count("[0,")
    pool.submit([prompt["e"], prompt["f"]], params)  # the next iteration, while the actor "trains" (version 1)
    second = pool.collect(want=2, version=1)
    # a and the third fast group began under version 0: at the bound, so trained now (a waited for), e and f later
    left = ({"b", "c", "d"} - set(trained)).pop()
    assert [p.label for p in second.prompts] == sorted(["a", left]) and second.rollout.versions == [0] * 4
    assert second.metrics["agent/carried_groups"] == 2 and len(second.scored.rewards) == 4
    pool.close()
    assert not pool.thread.is_alive() and pool.engine.closed


def test_a_pool_run_killed_mid_stream_resumes_and_keeps_the_bound(tiny_sft, tmp_path):
    """kill -9 of train_ppo with an episode pool (--async_train on the HF engine) while the next iteration's
    groups are in flight: the resumed run starts from the checkpoint with an empty pool, trains the rest and
    commits; no row of either run is past the staleness bound."""
    from alignment.tiny_world.paths import tiny_dir
    from tests.conftest import kill9_after_step, metric_rows, run_module
    from tests.ppo_cli import GROUP_SMALL, PROMPTS

    out, ckpt = tmp_path / "pool", tmp_path / "pool_ckpt"
    args = [
        "--pretrain", str(tiny_sft), "--save_path", str(out), "--ckpt_path", str(ckpt), *PROMPTS, *GROUP_SMALL,
        "--agent_func_path", str(tiny_dir() / "agent_retry.py"), "--async_train", "--agent_batch_linger_ms", "20",
        "--num_episodes", "2", "--save_steps", "1",
    ]  # fmt: skip
    killed = kill9_after_step("alignment.cli.train_ppo", args, step=2)
    assert "hanging after step 2" in killed and (ckpt / "latest").read_text().strip().endswith("global_step2")
    history = json.loads((ckpt / "global_step2" / "state.json").read_text())["ppo"]["history"]
    assert [r["train/agent/groups_in_flight"] for r in history] == [8, 8]  # the next iteration's, ahead
    resumed = run_module("alignment.cli.train_ppo", [*args, "--load_checkpoint"])
    assert "iteration 2 done" in resumed.stderr
    rows = metric_rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and (out / "MANIFEST.json").exists()
    assert all(r["train/staleness/max"] <= 1 for r in rows)  # --async_queue_size 1
    assert rows[2]["train/staleness/max"] == 0  # the resumed run's first batch began under its own weights
    # it submitted its own iteration and the next, not the iterations before the checkpoint again
    assert [r["train/agent/groups_in_flight"] for r in rows[2:]] == [8, 0]
