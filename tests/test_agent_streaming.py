"""Streaming agent episodes (--agent_batch_linger_ms, alignment/agents/llm.py) against lock-step turns, on the real
tiny model: a slow environment step holds only its own episode."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.test_agents import _episodes

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
    got = _episodes(tiny_base, str(tmp_path / "slow.py"), n=8, linger_s=linger_s)
    assert got.metrics["agent/turns"] == 3 and len(got.rollout) == 8
    ended = dict(json.loads(line) for line in log.read_text().splitlines())
    others = [t for k, t in ended.items() if k != 0]
    if linger_s is None:  # lock-step: each of the slow episode's three steps held everyone's next turn
        assert min(others) > ended[0] - 2.0  # after its second step (it ends 1.5 s after its third began)
    else:  # the others were done before the slow episode's second step began
        assert max(others) < ended[0] - 3.0
        assert got.metrics["agent/engine_batches"] > 3  # its turns went in batches of their own
