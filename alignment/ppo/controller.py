"""The PPO family's one controller: an iteration — prompts → generate → experience (old/ref
log-probs, values, rewards) → advantages → train critic and actor → weight sync — written once
against `ModelGroups`, a small typed interface with two backends:

- `alignment.ppo.local.LocalGroups` — every model in this process, one controller per launcher rank
  (`train_ppo` under deepspeed/torchrun); each controller takes rank r's share of the prompts;
- `alignment.ppo.ray_driver.RayGroups` — Ray actor groups placed on the cluster, one controller in
  the job's driver (`train_ppo_ray`), which sees the whole batch.

Statistics are global by construction: whitening sums and the metrics go through
`sum_across_ranks`/`mean_across_ranks`, which reduce over the launcher's ranks and are the identity
in the Ray driver (it has no process group: every row is already here). So the adaptive KL is
updated from the same, global KL on every controller.
"""

from __future__ import annotations

import logging
import random
import time
from typing import TYPE_CHECKING, Protocol

import torch

from alignment.agents.pool import episode_pool
from alignment.agents.runner import agent_runner
from alignment.config.ppo import PPOConfig
from alignment.datasets.images import PromptImages, processor_of
from alignment.datasets.prompts import PromptSample
from alignment.distributed.collectives import mean_across_ranks, sum_across_ranks
from alignment.losses.kl import KLController
from alignment.losses.ppo import is_weights
from alignment.losses.reward_norm import RunningMoments
from alignment.ppo.batch import SequenceBatch, behaviour_logprobs, rollout_to_batch
from alignment.ppo.dynamic_sampling import Carry, Groups, filtered, refill_prompts
from alignment.ppo.evaluation import eval_metrics, eval_params
from alignment.ppo.experience import Experience, assemble, experience_metrics, needs_old_logprobs, uses_reference
from alignment.ppo.loop import PPOState
from alignment.ppo.pass_history import PassHistory
from alignment.ppo.pending import Deferred, Done, Later, Mapped, Pending
from alignment.ppo.sampled import Generation, Sampled, of_episodes, stamped
from alignment.ppo.schedule import Sizes, prompt_order, sampling_params
from alignment.ppo.scores import reward_inputs, shape_scores
from alignment.ppo.staleness import staleness_metrics
from alignment.rewards.scorer import Scored
from alignment.rollout.types import Rollout, SamplingParams

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)


class ModelGroups(Protocol):
    rank: int  # this controller's share of each iteration's prompts: rank of world
    world: int
    has_critic: bool

    def generate(
        self, prompt_ids: list[list[int]], iteration: int, images: list[PromptImages] | None = None
    ) -> Pending[Rollout]: ...
    def generate_turn(self, prompt_ids: list[list[int]], params: SamplingParams) -> Rollout: ...
    def scores(self, queries: list[str], prompts: list[str], labels: list) -> Scored: ...
    def actor_logprobs(self, batch: SequenceBatch) -> Pending[torch.Tensor]: ...
    def ref_logprobs(self, batch: SequenceBatch) -> Pending[torch.Tensor]: ...
    def values(self, batch: SequenceBatch) -> Pending[torch.Tensor]: ...
    def train_critic(self, exp: Experience, seed: int) -> Pending[dict[str, float]]: ...
    def train_actor(self, exp: Experience, kl_coef: float, seed: int) -> Pending[dict[str, float]]: ...
    def sync_weights(self) -> float: ...
    def save(self, state: PPOState) -> None: ...
    def mark_best(self, iteration: int) -> None: ...
    def resume(self) -> PPOState | None: ...


def _get(pending: Pending[torch.Tensor] | None) -> torch.Tensor | None:
    return None if pending is None else pending.get()


class PPOController:
    def __init__(
        self,
        cfg: PPOConfig,
        groups: ModelGroups,
        tokenizer: PreTrainedTokenizerBase,
        prompts: list[PromptSample],
        eval_prompts: list[PromptSample] = (),
        sizes: Sizes | None = None,
    ):
        """`sizes`: the run's (alignment/ppo/run.py computes them once); computed here when not given."""
        self.cfg, self.groups, self.tokenizer, self.prompts = cfg, groups, tokenizer, prompts
        self.eval_prompts = list(eval_prompts)[groups.rank :: groups.world]  # this controller's share
        self.oversample = cfg.oversampled() // groups.world  # --vllm_generate_batch_size: the filter's first refills
        self.sizes = sizes or Sizes.of(cfg, len(prompts), groups.world)
        self.kl_ctl = KLController(cfg.algo.kl.init_coef, cfg.algo.kl.target, cfg.algo.kl.horizon)
        # --normalize_reward without a trained RM (whose saved mean/std normalise its own scores): running moments
        self.reward_moments = (
            RunningMoments() if cfg.reward.normalize_enable and not cfg.reward.model_name_or_path else None
        )
        recheck = cfg.algo.dynamic_filtering_recheck
        self.history = PassHistory(recheck) if recheck is not None else None  # alignment/ppo/pass_history.py
        self.positions = {id(p): i for i, p in enumerate(prompts)}
        self.synced = 0  # weight syncs so far: the version of the policy the engines sample from
        self.ahead: dict[int, Generation] = {}  # --async_train: iterations whose samples are being generated
        self.agent = agent_runner(cfg, tokenizer)
        self.pool = episode_pool(cfg, self.agent, groups)  # --async_train with agents on the HF engine, or None
        self.submitted = -1  # the last iteration whose prompts the pool has
        # --async_train with --dynamic_filtering on engines ahead: surplus mixed groups go to the next iteration
        carrying = cfg.train.async_enable and cfg.algo.dynamic_filtering_enable and self.pool is None
        self.carry = Carry(Groups.empty(), cfg.train.async_queue_size) if carrying else None
        if cfg.train.dynamic_batch_enable:
            log.info(
                "--use_dynamic_batch: training micro-batches of <= %d tokens, log-prob and value passes of <= %d "
                "(--micro_train_batch_size / --micro_rollout_batch_size no longer cut those passes)",
                cfg.train.max_tokens_per_gpu,
                cfg.rollout.max_tokens_per_gpu or cfg.train.max_tokens_per_gpu,
            )

    def prompt_batch(self, iteration: int) -> list[PromptSample]:
        """This controller's share of iteration's prompts (all of them when world is 1)."""
        cfg, g = self.cfg, self.groups
        episode, k = divmod(iteration, self.sizes.iterations_per_episode)
        order = prompt_order(len(self.prompts), cfg.train.seed, episode)
        per = cfg.rollout.batch_size // g.world
        start = k * cfg.rollout.batch_size + g.rank * per
        return [self.prompts[i] for i in order[start : start + per]]

    def position(self, prompt: PromptSample) -> int:
        """Where a prompt sits in the pool (the key of its pass history)."""
        return self.positions[id(prompt)]

    def generation(self, iteration: int) -> Generation:
        if self.pool is not None:
            return self.pooled(iteration)
        prompts = self.iteration_prompts(iteration)
        return Generation(prompts, self.sample(prompts, iteration), self.synced)

    def iteration_prompts(self, iteration: int) -> list[PromptSample]:
        """This controller's prompts of an iteration, less those its pass history skips, plus refills for them
        and --vllm_generate_batch_size's extra."""
        cfg, g = self.cfg, self.groups
        prompts, extra = self.prompt_batch(iteration), self.oversample
        if self.history is not None:  # the batch's prompts the history expects to teach nothing: others instead
            rng = random.Random(f"{cfg.train.seed}-{iteration}-drawn-{g.rank}")
            drawn = [p for p in prompts if self.history.drawn(self.position(p), rng)]
            prompts, extra = drawn, extra + len(prompts) - len(drawn)
        if extra:
            prompts += refill_prompts(self.prompts, extra, cfg.train.seed, iteration, 0, g.rank, self.history)
        return prompts

    def pooled(self, iteration: int) -> Generation:
        """An episode pool's iteration (alignment/agents/pool.py): iterations up to --async_queue_size ahead are in
        the pool; this one trains on the first groups of them to finish (and any at the staleness bound)."""
        cfg, g = self.cfg, self.groups
        first = max(self.submitted + 1, iteration)  # a resumed run's pool starts empty, at the resumed iteration
        for k in range(first, min(iteration + cfg.train.async_queue_size, self.sizes.iterations - 1) + 1):
            params = sampling_params(cfg, k, g.rank, g.world)
            turn = self.agent.params(params.temperature, params.top_p, params.logprobs)
            self.pool.submit(self.iteration_prompts(k), turn)
            self.submitted = k
        want = cfg.rollout.batch_size // g.world + self.oversample
        return Generation([], Deferred(lambda: of_episodes(self.pool.collect(want, self.synced))), self.synced)

    def sample(self, prompts: list[PromptSample], key: int) -> Pending[Sampled]:
        """Samples for these prompts, seeded by `key` (an iteration, or a refill round's key): one response each
        from the engines, or with --agent_func_path one multi-turn episode each, scored by its environment."""
        g, version = self.groups, self.synced
        if self.agent is None:
            shown = [p.engine_images() for p in prompts] if any(p.images for p in prompts) else None
            return Mapped(g.generate([p.ids for p in prompts], key, shown), lambda r: stamped(Sampled(r), version))
        params = sampling_params(self.cfg, key, g.rank, g.world)
        run = lambda: stamped(self.episodes(prompts, params), version)  # noqa: E731
        return Later(run) if self.cfg.train.async_enable and self.pool is None else Done(run())

    def episodes(self, prompts: list[PromptSample], params: SamplingParams) -> Sampled:
        got = self.agent.run(
            prompts, params.n, self.groups.generate_turn, params.seed, params.temperature, params.top_p, params.logprobs
        )
        return of_episodes(got)

    def score(self, prompts: list[PromptSample], sampled: Sampled) -> Scored:
        return sampled.scored or self.groups.scores(*reward_inputs(self.tokenizer, sampled.rollout, prompts))

    def generate_ahead(self, iteration: int) -> None:
        """--async_train: start generating the next --async_queue_size iterations on the engines now, with
        the weights they have; the weight sync after this iteration's update queues behind them (a Ray
        actor runs its calls in order), so their samples are at most that many updates old."""
        last = min(iteration + self.cfg.train.async_queue_size, self.sizes.iterations - 1)
        for k in range(iteration + 1, last + 1):
            if k not in self.ahead:
                self.ahead[k] = self.generation(k)

    def make_experience(self, iteration: int) -> tuple[Experience, dict[str, float]]:
        cfg, g = self.cfg, self.groups
        t0 = time.time()
        gen = self.ahead.pop(iteration, None) or self.generation(iteration)
        sampled, engines_ahead = gen.sampled.get(), cfg.train.async_enable and self.pool is None
        prompts = sampled.prompts or gen.prompts
        if self.pool is not None and iteration == self.sizes.iterations - 1:
            self.pool.close()  # the last iteration: what is still in flight trains nowhere
        elif engines_ahead:
            self.generate_ahead(iteration)
        t_gen = time.time()
        rollout, scored, dyn = sampled.rollout, sampled.scored, dict(sampled.metrics)
        if (
            cfg.algo.dynamic_filtering_enable
        ):  # scored first: the groups that teach nothing are replaced before any forward pass
            prompts, rollout, scored = filtered(
                self, iteration, prompts, sampled, dyn, cfg.rollout.batch_size // g.world
            )
        batch = rollout_to_batch(rollout, self.tokenizer.pad_token_id, processor_of(self.tokenizer))
        # started together: on Ray the actor, reference and critic groups compute at the same time.
        # --async_train on vLLM engines: the ratio's denominator is the policy that sampled, as the engine scored it;
        # --enable_vllm_is_correction (with or without --async_train, as OpenRLHF): the trainer's own log-probs,
        # the ratio's denominator, and the engine's weigh each token by how far the two disagree
        old = (
            g.actor_logprobs(batch)
            if cfg.algo.advantage.is_correction_enable or (needs_old_logprobs(cfg) and not engines_ahead)
            else Done(behaviour_logprobs(rollout, batch))
            if engines_ahead
            else None
        )
        ref = g.ref_logprobs(batch) if uses_reference(cfg.algo) else None
        vals = g.values(batch) if g.has_critic else None
        scored = scored or self.score(prompts, Sampled(rollout))
        lengths = batch.action_mask.sum(-1)
        scores, shaped = shape_scores(cfg, scored.rewards, lengths, rollout.finished, self.reward_moments)
        exp = assemble(cfg, batch, scores, _get(old), _get(ref), _get(vals), self.kl_ctl.value, across=sum_across_ranks)
        if cfg.algo.advantage.is_correction_enable:
            exp.is_weight = is_weights(
                exp.old_logp,
                behaviour_logprobs(rollout, batch),
                batch.action_mask,
                *cfg.is_thresholds(),
                cfg.algo.advantage.is_correction_type,
            )
        metrics = experience_metrics(exp, rollout.finished)
        metrics.update({f"reward/{k}": v for k, v in scored.logs.items()})  # a reward_func's extra_logs
        metrics.update(shaped)
        metrics.update(dyn)
        metrics.update(time_generate=t_gen - t0, time_experience=time.time() - t_gen)
        if cfg.train.async_enable:  # updates between the sampling policy and the one about to train
            metrics["policy_lag"] = float(self.synced - gen.version)
            lags = [self.synced - v for v in rollout.versions]  # per sample: refills are fresher than the batch
            metrics.update(staleness_metrics(lags, cfg.train.async_queue_size))
        if rollout.updates_seen:  # --partial_rollout_enable: responses that finished on newer weights
            seen = rollout.updates_seen
            metrics["partial/across_updates_fraction"] = sum(u > 0 for u in seen) / len(seen)
        return exp, metrics

    def evaluate(self, iteration: int) -> dict[str, float]:
        """--eval_dataset (alignment/ppo/evaluation.py): the policy's answers to the held-out prompts, scored
        by the training reward; averaged over the launcher's ranks."""
        params = eval_params(self.cfg, iteration)
        prompts = self.eval_prompts
        if self.agent is not None:
            sampled = self.episodes(prompts, params)
        else:
            sampled = Sampled(self.groups.generate_turn([p.ids for p in prompts], params))
        scored = self.score(prompts, sampled)
        return mean_across_ranks(eval_metrics(scored.rewards, params.n, sampled.rollout))

    def restore(self, state: PPOState) -> None:
        self.kl_ctl.value = state.kl_coef
        if self.reward_moments is not None and state.reward_moments:
            self.reward_moments = RunningMoments(*state.reward_moments)
        if self.history is not None:
            self.history = PassHistory.restored(self.history.recheck, state.pass_history)

    def snapshot(self, iteration: int, history: list[dict]) -> PPOState:
        moments = self.reward_moments.state() if self.reward_moments is not None else []
        passes = self.history.state() if self.history is not None else []
        return PPOState(iteration, self.kl_ctl.value, history, moments, pass_history=passes)

    def step(self, iteration: int) -> dict[str, float]:
        """One whole iteration; its metrics, averaged over the launcher's ranks."""
        cfg, g = self.cfg, self.groups
        exp, metrics = self.make_experience(iteration)
        t0 = time.time()
        seed = cfg.train.seed + iteration
        critic = g.train_critic(exp, seed) if g.has_critic else None
        actor = g.train_actor(exp, self.kl_ctl.value, seed) if iteration >= cfg.critic.freezing_steps else None
        for trained in (critic, actor):
            if trained is not None:
                metrics.update(trained.get())
        t_train = time.time()
        metrics.update(
            kl_coef=self.kl_ctl.value, time_train=t_train - t0, time_sync=g.sync_weights() if actor is not None else 0.0
        )
        if actor is not None:
            self.synced += 1
        metrics = mean_across_ranks(metrics)
        # every controller updates β from the same, global KL, so the coefficients never drift apart
        self.kl_ctl.update(metrics.get("kl", 0.0), len(exp) * g.world)  # no kl: no KL term, fixed β
        return metrics
