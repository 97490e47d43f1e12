"""The retry world of agent_retry.py behind a slow, heavy-tailed environment: every step first waits a lognormal
latency, mean 0.3 s, median 0.1 s, 99th percentile 3.2 s (a tool call or a sandbox that is usually quick and
now and then very slow). For measuring how much of RL's time goes to waiting (benchmarks/rl_time.py): lock-step
turns wait for the slowest step of each turn, streaming episodes (--agent_batch_linger_ms) only for their own.
Latencies are seeded by the order episodes are built in, so a run's waits repeat.
"""

import asyncio
import importlib.util
import itertools
import math
import random
from pathlib import Path

_spec = importlib.util.spec_from_file_location("tiny_agent_retry", Path(__file__).with_name("agent_retry.py"))
_retry = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_retry)

MEAN_S, SIGMA = 0.3, 1.5  # lognormal: mu = ln(mean) - sigma^2 / 2; p99 = exp(mu + 2.326 sigma) = 3.2 s
_BUILT = itertools.count()


def latency(rng: random.Random) -> float:
    return rng.lognormvariate(math.log(MEAN_S) - SIGMA**2 / 2, SIGMA)


class AgentInstance(_retry.AgentInstance):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rng = random.Random(next(_BUILT))

    async def step(self, states, **kwargs):
        await asyncio.sleep(latency(self.rng))
        return await super().step(states, **kwargs)
