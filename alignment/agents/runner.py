"""Run one iteration's episodes (--agent_func_path) and hand them to PPO as a Rollout with the environment's
rewards.

Each of the n samples of a prompt is its own episode with its own AgentInstance; all episodes run as
asyncio tasks over one `BatchingEngine`. An episode becomes one training row: the prompt, then everything
after it — model turns and environment feedback — as the "response", with `Rollout.loss_mask` 1 on the
model's tokens and 0 on the feedback's, so feedback is context for later turns but never in the loss and
never given an advantage.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from alignment import openrlhf_names
from alignment.agents.contract import AgentError, AgentExecutorBase, extra_logs, number
from alignment.agents.executor import MultiTurnAgentExecutor
from alignment.agents.llm import BatchingEngine, GenerateBatch, RequestOutput, SamplingParams, image_files
from alignment.config.ppo import PPOConfig
from alignment.datasets.images import load_image
from alignment.datasets.prompts import PromptSample
from alignment.rewards.scorer import Scored
from alignment.rollout.types import Rollout

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class AgentSettings:
    path: str
    max_turns: int
    step_timeout: float
    max_length: int  # prompt + every turn and feedback, in tokens
    turn_tokens: int  # most new tokens per model turn (--generate_max_len)
    partial: bool = False  # --partial_rollout_enable: each episode's mid-turn weight updates are counted
    linger_s: float | None = None  # --agent_batch_linger_ms: streaming episodes (alignment/agents/llm.py)
    max_images: int = 0  # --max_images_per_prompt: the most images an episode's context may hold


@dataclass
class Episodes:
    """One iteration's episodes as PPO consumes them."""

    rollout: Rollout
    scored: Scored
    metrics: dict[str, float] = field(default_factory=dict)
    prompts: list[PromptSample] | None = None  # an episode pool's: the prompts its groups belong to, in order


def load_agent_file(path: str) -> tuple[type | None, type | None]:
    """(AgentInstance class or None, AgentExecutor class or None) from a user's file, at least one of them;
    AgentError naming what is wrong. A file written for OpenRLHF imports `openrlhf.utils.agent`: answered with
    alignflow's classes where OpenRLHF is not installed (alignment/openrlhf_names.py), so classes are checked
    by what they do (an async step / execute), not by their base class."""
    file = Path(path)
    if not file.is_file():
        raise AgentError(f"--agent_func_path {path}: no such file; pass a .py file defining AgentInstance")
    openrlhf_names.install()
    spec = importlib.util.spec_from_file_location(f"alignflow_agent_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as e:
        raise AgentError(f"--agent_func_path {path}: {e} (install the package it names)") from None
    instance, executor = getattr(module, "AgentInstance", None), getattr(module, "AgentExecutor", None)
    if instance is not None and not (isinstance(instance, type) and callable(getattr(instance, "step", None))):
        raise AgentError(f"--agent_func_path {path}: AgentInstance must be a class with async reset and step")
    if executor is not None and not (isinstance(executor, type) and callable(getattr(executor, "execute", None))):
        raise AgentError(f"--agent_func_path {path}: AgentExecutor must be a class with async execute(...)")
    if instance is None and executor is None:
        raise AgentError(
            f"--agent_func_path {path}: define `class AgentInstance(AgentInstanceBase)` with async reset(states) "
            f"and step(states), or `class AgentExecutor(AgentExecutorBase)` with async execute(prompt, label, "
            f"sampling_params, max_length, hf_tokenizer, llm_engine)"
        )
    return instance, executor


def agent_runner(cfg: PPOConfig, tokenizer: PreTrainedTokenizerBase) -> "AgentRunner | None":
    """The runner of a PPO config's --agent_func_path, or None without one."""
    t = cfg.train
    if not t.agent_func_path:
        return None
    linger = None if t.agent_batch_linger_ms is None else t.agent_batch_linger_ms / 1000
    settings = AgentSettings(
        t.agent_func_path, t.agent_max_turns, t.agent_step_timeout, cfg.sequence_len(), cfg.rollout.max_new_tokens,
        t.partial_rollout_enable, linger, cfg.data.max_images_per_prompt,
    )  # fmt: skip
    return AgentRunner(settings, tokenizer)


class AgentRunner:
    def __init__(self, settings: AgentSettings, tokenizer: PreTrainedTokenizerBase):
        self.s, self.tokenizer = settings, tokenizer
        self.instance_cls, self.executor_cls = load_agent_file(settings.path)

    def _executor(self) -> AgentExecutorBase:
        if self.executor_cls is None or self.executor_cls is MultiTurnAgentExecutor:
            return MultiTurnAgentExecutor(self.instance_cls, self.s.max_turns, self.s.step_timeout, self.s.path)
        # OpenRLHF's executors take the instance class; one whose __init__ takes nothing is built without it
        takes_cls = len(inspect.signature(self.executor_cls).parameters) > 0
        executor = self.executor_cls(self.instance_cls) if takes_cls else self.executor_cls()
        if isinstance(executor, MultiTurnAgentExecutor):  # OpenRLHF's pattern: super().__init__(AgentInstance)
            executor.max_turns, executor.step_timeout, executor.where = (
                self.s.max_turns,
                self.s.step_timeout,
                self.s.path,
            )
        return executor

    def run(
        self,
        prompts: list[PromptSample],
        n: int,
        generate: GenerateBatch,
        seed: int,
        temperature: float,
        top_p: float,
        logprobs: bool,
        greedy: bool = False,
    ) -> Episodes:
        """n episodes per prompt, in prompt order (n consecutive rows per prompt, as group estimators expect)."""
        engine = BatchingEngine(generate, self.tokenizer, seed, greedy, self.s.linger_s)
        params = self.params(temperature, top_p, logprobs)
        jobs = [(k, p) for k, p in enumerate(prompts) for _ in range(n)]
        outs = asyncio.run(self._all(engine, jobs, params))
        return self.episodes(jobs, outs, engine.batches)

    def params(self, temperature: float, top_p: float, logprobs: bool) -> SamplingParams:
        """A turn's sampling settings as the executors get them."""
        return SamplingParams(self.s.turn_tokens, temperature, top_p, 0 if logprobs else None)

    def episodes(self, jobs: list[tuple[int, PromptSample]], outs: list, batches: int) -> Episodes:
        """The episodes' training rows (prompt k's rows carry prompt index k), rewards and metrics."""
        episodes = Episodes(Rollout(), Scored(torch.zeros(0), torch.zeros(0)))
        rewards, scores, logs, turns, env_tokens = [], [], [], [], 0
        for e, ((k, p), out) in enumerate(zip(jobs, outs)):
            row = self._row(out, p, e)
            episodes.rollout.extend(row.rollout, index_offset=k)
            rewards.append(row.reward), scores.append(row.score), logs.append(row.logs), turns.append(row.turns)
            env_tokens += row.env_tokens
        names = {name for d in logs for name in d}
        means = {name: sum(d[name] for d in logs if name in d) / sum(1 for d in logs if name in d) for name in names}
        episodes.scored = Scored(torch.tensor(rewards), torch.tensor(scores), means)
        model_tokens = sum(sum(m) for m in episodes.rollout.loss_mask)
        episodes.metrics = {
            "agent/turns": sum(turns) / len(turns),
            "agent/engine_batches": float(batches),
            "agent/feedback_token_fraction": env_tokens / max(1, env_tokens + model_tokens),
        }
        if self.s.max_images:  # a vision-language policy: pictures per training row, the prompt's and the environment's
            episodes.metrics["agent/images"] = sum(map(len, episodes.rollout.images)) / len(outs)
        return episodes

    async def _all(self, engine: BatchingEngine, jobs: list[tuple[int, PromptSample]], params: SamplingParams) -> list:
        for _ in jobs:
            engine.episode_started()
        tasks = [asyncio.create_task(self.one(engine, p, params, e)) for e, (_, p) in enumerate(jobs)]
        try:
            return await asyncio.gather(*tasks)
        finally:
            engine.closed = True
            for t in tasks:
                t.cancel()

    async def one(self, engine: BatchingEngine, prompt: PromptSample, params: SamplingParams, e: int) -> dict:
        """Episode `e` on the shared engine; the engine counts it live until it ends (episode_started first)."""
        executor = self._executor()
        view = _EpisodeEngine(engine, self.s.max_images, f"{self.s.path} (episode {e})")
        # our own execute takes the prompt's token ids too; an override of it (OpenRLHF's signature) does not
        kwargs: dict[str, list] = (
            {"prompt_ids": prompt.ids} if type(executor).execute is MultiTurnAgentExecutor.execute else {}
        )
        if prompt.images:  # OpenRLHF v0.11's executors take the prompt's images (PIL) as `images`
            kwargs["images"] = [load_image(f, f"{self.s.path} (episode {e})") for f in prompt.engine_images().files]
        try:
            out = await executor.execute(
                prompt.text,
                prompt.label,
                SamplingParams(**vars(params)),
                self.s.max_length,
                self.tokenizer,
                view,
                **kwargs,
            )
        except AgentError as err:
            raise AgentError(f"{err} (episode {e})") from None
        except Exception as err:  # the user's code: where it failed, on one line
            frame = traceback.extract_tb(err.__traceback__)[-1]
            raise AgentError(
                f"{self.s.path}: episode {e} failed in {frame.name} (line {frame.lineno} of "
                f"{Path(frame.filename).name}): {type(err).__name__}: {err}"
            ) from None
        finally:
            engine.episode_ended()
        return {**out, "image_files": view.files} if isinstance(out, dict) else out

    def _row(self, out: Any, prompt: PromptSample, e: int) -> "_Row":
        where = f"{self.s.path} (episode {e})"
        if not isinstance(out, dict) or "observation_tokens" not in out or "action_ranges" not in out:
            raise AgentError(f"{where}: execute must return a dict with observation_tokens, action_ranges, reward")
        tokens, ranges = list(out["observation_tokens"]), [tuple(r) for r in out["action_ranges"]]
        if (
            not ranges
            or any(not (0 < a <= b <= len(tokens)) for a, b in ranges)
            or any(b1 > a2 for (_, b1), (a2, _) in zip(ranges, ranges[1:]))
        ):
            raise AgentError(
                f"{where}: action_ranges {ranges} must be ordered, non-overlapping spans after the "
                f"prompt within the {len(tokens)} observation tokens"
            )
        start, end = ranges[0][0], ranges[-1][1]  # feedback after the last turn is context for nothing
        mask = [0] * (end - start)
        for a, b in ranges:
            mask[a - start : b - start] = [1] * (b - a)
        lps = out.get("rollout_log_probs")
        reward = number(out.get("reward"), f"{where}: reward")
        score = out.get("scores")
        row = Rollout(
            [tokens[:start]],
            [tokens[start:end]],
            [0],
            [bool(out.get("done", True))],
            [list(lps[start:end])] if lps is not None else [],
            [mask],
            [int(out.get("updates_seen", 0))] if self.s.partial else [],
            images=[list(out["image_files"])] if self.s.max_images else [],  # one entry a row, or none
        )
        return _Row(
            row,
            reward,
            reward if score is None else number(score, f"{where}: scores"),
            extra_logs(out.get("extra_logs"), where),
            len(ranges),
            mask.count(0),
        )


class _EpisodeEngine:
    """One episode's `llm_engine`: the shared BatchingEngine, and the images of the context it last generated
    from, which are the training row's (the row ends with that turn; images placed after it are in no row)."""

    def __init__(self, engine: BatchingEngine, max_images: int, where: str):
        self.engine, self.max_images, self.where, self.files = engine, max_images, where, ()

    async def generate(self, token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None) -> RequestOutput:
        files = image_files(multi_modal_data)
        if len(files) > self.max_images:
            raise AgentError(
                f"{self.where}: the context holds {len(files)} images, more than --max_images_per_prompt "
                f"{self.max_images} (the prompt's and the environment's together); raise it"
            )
        self.files = files
        return await self.engine.submit(token_ids, sampling_params, files)


@dataclass
class _Row:
    rollout: Rollout
    reward: float
    score: float
    logs: dict[str, float]
    turns: int
    env_tokens: int
