"""One callable for every reward source: reward models (weighted, optionally normalised by their
own mean/std), a reward_func .py file, or reward servers. Returns a `Scored`: [B] rewards, [B] scores and
the source's extra logs."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from alignment.config.base import ConfigError
from alignment.config.rewards import RewardSourceConfig
from alignment.datasets.batch import TokenizedSample, collate_packed
from alignment.datasets.formatting import end_at_eos
from alignment.models.loading import resolve_model_path
from alignment.models.reward_model import ValueCapture, load_reward_model, read_reward_stats
from alignment.rewards.process_reward import ProcessRewardModel, read_prm_entry
from alignment.rewards.remote import RemoteRewardClient
from alignment.rewards.reward_func import RewardError, RewardOutput, load_reward_func, parse_output

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Scored:
    """What a reward source gave B samples."""

    rewards: torch.Tensor  # [B] float: what the advantage is computed from
    scores: torch.Tensor  # [B] float: what dynamic filtering reads
    logs: dict[str, float] = field(default_factory=dict)  # the source's extra_logs, batch means

    @staticmethod
    def of(out: RewardOutput) -> "Scored":
        return Scored(torch.tensor(out.rewards), torch.tensor(out.scores), dict(out.logs))

    @staticmethod
    def concat(parts: list["Scored"]) -> "Scored":
        """Shards of one batch, in order (extra logs weighted by shard size)."""
        sizes = [len(p.rewards) for p in parts]
        names = {k for p in parts for k in p.logs}
        logs = {
            k: sum(p.logs[k] * n for p, n in zip(parts, sizes) if k in p.logs)
            / max(1, sum(n for p, n in zip(parts, sizes) if k in p.logs))
            for k in names
        }
        return Scored(torch.cat([p.rewards for p in parts]), torch.cat([p.scores for p in parts]), logs)


class RewardModels:
    """--reward_pretrain a,b [--reward_weights]: each RM scores the full query at its last token; a
    process reward model (config.json with a "prm" entry) scores it at its steps' placeholders."""

    def __init__(
        self,
        paths: list[str],
        weights: list[float],
        tokenizer: PreTrainedTokenizerBase,
        dtype: torch.dtype,
        attn: str,
        device: str,
        normalize: bool,
        batch_size: int = 32,
        trust_remote_code: bool = False,
        pack_tokens: int | None = None,
    ):
        """`pack_tokens` (serve_rm's --packing_samples): a batch's queries are scored packed into rows of at most
        that many tokens (one row under flash-attention, which reads packing from position ids) instead of
        right-padded to the longest; the same scores, the padding no longer computed."""
        self.tokenizer, self.device, self.batch_size, self.weights = tokenizer, device, batch_size, weights
        self.pack_tokens, self.mask_dtype = pack_tokens, None if attn == "flash_attention_2" else torch.bool
        self.captures: dict[int, ValueCapture] = {}  # packed scoring: each RM's value head, read per token
        self.models, self.stats = [], []
        locals_ = [resolve_model_path(p, "--reward_pretrain") for p in paths]
        entries = [read_prm_entry(local) for local in locals_]  # config.json only: before any weights load
        if normalize and all(e is not None for e in entries):  # the flag would change nothing
            raise ConfigError(
                "--normalize_reward normalises reward models' scores by the mean/std their training "
                "saved; a process reward model saves none (its scores are P(good) in [0, 1]): drop "
                "--normalize_reward"
            )
        for p, local, entry in zip(paths, locals_, entries):
            if entry is not None:  # a PRM's scores stay P(good) in [0, 1] beside normalised RMs
                self.models.append(ProcessRewardModel(local, entry, tokenizer, dtype, attn, device, trust_remote_code))
                self.stats.append(None)
                continue
            model = load_reward_model(
                local,
                dtype,
                attn,
                tokenizer.pad_token_id,
                flag="--reward_pretrain",
                trust_remote_code=trust_remote_code,
            )
            self.models.append(model.to(device).eval().requires_grad_(False))
            self.stats.append(read_reward_stats(local) if normalize else None)

    @torch.no_grad()
    def __call__(self, queries: list[str], prompts: list[str], labels: list) -> Scored:
        total = torch.zeros(len(queries))
        for model, stats, w in zip(self.models, self.stats, self.weights):
            scores = torch.cat(
                [self._score(model, queries[s : s + self.batch_size]) for s in range(0, len(queries), self.batch_size)]
            )
            if stats is not None:
                scores = (scores - stats[0]) / max(stats[1], 1e-8)
            total += w * scores
        return Scored(total, total)

    def _score(self, model: torch.nn.Module | ProcessRewardModel, texts: list[str]) -> torch.Tensor:
        if isinstance(model, ProcessRewardModel):
            return model(texts)
        # read at the response's EOS, as in training (train_rm ends responses there), even when a
        # client sends the chat template's text after it
        texts = [end_at_eos(t, self.tokenizer.eos_token) for t in texts]
        if self.pack_tokens is not None:
            return self._score_packed(model, texts)
        side, self.tokenizer.padding_side = self.tokenizer.padding_side, "right"
        try:
            enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        finally:
            self.tokenizer.padding_side = side
        # HF's sequence-classification pooling reads the last non-pad token (pad_token_id is set)
        return model(**enc.to(self.device)).logits.squeeze(-1).float().cpu()

    def _score_packed(self, model: torch.nn.Module, texts: list[str]) -> torch.Tensor:
        """Each text's value at its last token, the texts packed into rows (alignment.datasets.batch)."""
        capture = self.captures.get(id(model)) or self.captures.setdefault(id(model), ValueCapture(model))
        ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        batch = collate_packed([TokenizedSample(x, [0] * len(x)) for x in ids], self.mask_dtype, self.pack_tokens)
        batch = batch.to(self.device)
        model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids)
        return capture.take()[batch.last_token()].float().cpu()


class FunctionReward:
    """A reward_func file or reward servers: text in, rewards out."""

    def __init__(self, spec: str):
        self.source, self.calls = spec, 0
        self.is_file = spec.endswith(".py")
        if self.is_file:
            self.fn = load_reward_func(spec)
        else:
            self.fn = RemoteRewardClient.from_flag(spec)
            self.fn.check_reachable()

    def __call__(self, queries: list[str], prompts: list[str], labels: list) -> Scored:
        self.calls += 1
        try:
            out = self.fn(queries, prompts, labels)
        except RewardError:  # the client's own lines (a server down, a bad answer) name the source already
            raise
        except Exception as e:  # the user's file raised: one line naming it, the call and the exception
            if not self.is_file:
                raise
            raise RewardError(
                f"--remote_rm_url {self.source}: reward_func raised {type(e).__name__}: {e} on call {self.calls} "
                f"({len(queries)} samples; labels {_preview(labels)}); it must score every response it is given "
                f"(the start-up check passed): fix the file, then rerun with --load_checkpoint to resume"
            ) from e
        return Scored.of(out if isinstance(out, RewardOutput) else parse_output(out, len(queries), self.source))


def _preview(labels: list) -> str:
    """The first labels of a batch, short: which rows the file choked on is often visible in them."""
    shown = ", ".join(repr(x)[:30] for x in labels[:3])
    return f"[{shown}{', ...' if len(labels) > 3 else ''}]"


def make_reward(
    cfg: RewardSourceConfig,
    tokenizer: PreTrainedTokenizerBase,
    dtype: torch.dtype,
    attn: str,
    device: str,
    pack_tokens: int | None = None,
) -> FunctionReward | RewardModels:
    if cfg.reward.remote_url:
        if cfg.reward.model_name_or_path:
            log.info(
                "--remote_rm_url given: it is the reward; --reward_pretrain %s is not loaded",
                cfg.reward.model_name_or_path,
            )
        return FunctionReward(cfg.reward.remote_url)
    paths = [p for p in cfg.reward.model_name_or_path.split(",") if p]
    weights = (
        [float(w) for w in cfg.reward.reward_weights.split(",")] if cfg.reward.reward_weights else [1.0] * len(paths)
    )
    return RewardModels(
        paths,
        weights,
        tokenizer,
        dtype,
        attn,
        device,
        cfg.reward.normalize_enable,
        trust_remote_code=cfg.model.trust_remote_code,
        pack_tokens=pack_tokens,
    )
