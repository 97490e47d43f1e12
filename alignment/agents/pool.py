"""Agent episodes that outlive their iteration (--async_train with --agent_func_path on the HF engine).

Lock-step or streamed, an iteration of `AgentRunner.run` trains only when its slowest episode is done: the
trainer waits on the environment's tail. Here the prompts of the iterations up to --async_queue_size ahead are
in a pool of episodes whose event loop runs on a thread of its own; an iteration trains on the first groups to
complete (a group: a prompt's n episodes, as group estimators need) and leaves the others running: their
environments step while the actor trains, their next turns are generated in the next iteration, and they join
a later batch.

The staleness bound is --async_queue_size: a group is trained at most that many policy updates after it began
(its `version`: the engine generates only while an iteration collects, since on the HF engine the policy is
the actor itself, which the trainer has in between, so a group begins at the first collect after it was
submitted); a group that old is waited for. Each row carries its group's version (Rollout.versions), so the
bound is asserted per sample (train/staleness/*). Which episodes share a batch depends on timing, so a rerun
samples other tokens (as with --agent_batch_linger_ms); a resume starts with an empty pool (the episodes in
flight at a checkpoint are not in it: their prompts wait for the next epoch).
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from alignment.agents.llm import BatchingEngine, GenerateBatch, SamplingParams
from alignment.agents.runner import AgentRunner, Episodes
from alignment.config.base import ConfigError
from alignment.config.ppo import PPOConfig
from alignment.datasets.prompts import PromptSample


def episode_pool(cfg: PPOConfig, runner: AgentRunner | None, groups: Any) -> "EpisodePool | None":
    """The pool of a PPO config with --async_train and --agent_func_path on the HF engine, else None; `groups`
    (alignment.ppo.controller.ModelGroups) generates its turns. One controller generates for the whole batch
    then (a launcher's ranks would call the engine out of step)."""
    if runner is None or not cfg.train.async_enable or cfg.vllm.num_engines:
        return None
    world = groups.world
    if world > 1:
        raise ConfigError(
            f"--async_train with --agent_func_path on the HF engine runs one episode pool; {world} launcher "
            f"ranks would generate out of step: run train_ppo on one rank, or train_ppo_ray"
        )
    n, bound = cfg.rollout.n_samples_per_prompt, cfg.train.async_queue_size
    return EpisodePool(runner, groups.generate_turn, n, bound, cfg.train.seed)


@dataclass
class _Group:
    prompt: PromptSample
    version: int | None  # the policy it began under: the first collect's (the engine generates only then)
    outs: Future  # its n episodes' results, in order


class EpisodePool:
    def __init__(self, runner: AgentRunner, generate: GenerateBatch, n: int, bound: int, seed: int):
        self.runner, self.n, self.bound = runner, n, bound
        self.engine = BatchingEngine(generate, runner.tokenizer, seed, False, runner.s.linger_s)
        self.engine.paused = True
        self.groups: list[_Group] = []  # in flight or done and not yet trained, oldest first
        self.started = 0  # episodes so far (numbers them in errors)
        self.changed = threading.Event()  # a group finished
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="agent-episode-pool", daemon=True)
        self.thread.start()

    def submit(self, prompts: list[PromptSample], params: SamplingParams) -> None:
        """Start n episodes for each prompt, sampled with `params` (their environments reset now; their first
        turns are generated at the next collect)."""
        for prompt in prompts:
            first, self.started = self.started, self.started + self.n
            outs = asyncio.run_coroutine_threadsafe(self._group(prompt, params, first), self.loop)
            outs.add_done_callback(lambda _: self.changed.set())
            self.groups.append(_Group(prompt, None, outs))

    async def _group(self, prompt: PromptSample, params: SamplingParams, first: int) -> list:
        for _ in range(self.n):
            self.engine.episode_started()
        episodes = [self.runner.one(self.engine, prompt, params, first + j) for j in range(self.n)]
        return await asyncio.gather(*episodes)

    def collect(self, want: int, version: int) -> Episodes:
        """The first `want` groups to complete, oldest first, and every group `bound` updates old (waited for);
        the engine generates while this waits. Prompt k of the episodes' `prompts` owns the rows of index k."""
        for g in self.groups:
            g.version = version if g.version is None else g.version
        self._on_loop(self._unpause())
        batches = self.engine.batches
        while True:
            self.changed.clear()
            ready = [g for g in self.groups if g.outs.done()]
            failed = next((g for g in ready if g.outs.exception() is not None), None)
            if failed is not None:
                self.close()
                raise failed.outs.exception()
            due = [g for g in self.groups if version - g.version >= self.bound]
            if all(g.outs.done() for g in due) and len(ready) >= min(want, len(self.groups)):
                break
            self.changed.wait(1.0)
        self._on_loop(self.engine.pause())
        taken = due + [g for g in ready if g not in due][: max(0, want - len(due))]
        self.groups = [g for g in self.groups if g not in taken]
        jobs = [(k, g.prompt) for k, g in enumerate(taken) for _ in range(self.n)]
        got = self.runner.episodes(jobs, [out for g in taken for out in g.outs.result()], self.engine.batches - batches)
        got.rollout.versions = [g.version for g in taken for _ in range(self.n)]
        got.metrics.update(
            {
                "agent/carried_groups": float(sum(g.version < version for g in taken)),
                "agent/groups_in_flight": float(len(self.groups)),
            }
        )
        got.prompts = [g.prompt for g in taken]
        return got

    async def _unpause(self) -> None:  # on the loop: the engine's timers are the loop's
        self.engine.unpause()

    def _on_loop(self, coro) -> None:  # noqa: ANN001  (a coroutine)
        asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        """Cancel what is in flight (the run's last iteration is trained, or it failed) and end the thread."""
        if not self.thread.is_alive():
            return
        self.engine.closed = True
        for g in self.groups:
            g.outs.cancel()
        self._on_loop(self._drain())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=60)
        self.loop.close()

    async def _drain(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
