"""OpenRLHF's lora_combiner: a saved PEFT adapter merged into its base (a causal LM or a reward model)
and committed like any stage output."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from transformers import AutoTokenizer

from alignment import storage
from alignment.config.base import public_dict
from alignment.config.tools import LoraCombinerConfig
from alignment.models.loading import ModelLoadError, has_tokenizer, load_causal_lm, resolve_model_path
from alignment.models.lora import merge_adapter
from alignment.models.reward_model import HEAD, export_names, load_reward_model
from alignment.models.saving import save_hf_model
from alignment.nonfinite import check_weights
from alignment.outputs import StagedOutput

log = logging.getLogger(__name__)


def adapter_dir(uri: str, is_rm: bool) -> Path:
    """A local copy of the adapter folder at `uri`, its task checked against --is_rm."""
    if storage.is_remote(uri) or uri.startswith("file://"):
        if not storage.is_committed(uri):
            raise ModelLoadError(
                f"--lora_path {uri}: no committed adapter there (no MANIFEST.json); point it at a "
                f"LoRA stage's output"
            )
        path = storage.download_dir(uri)
    else:
        path = Path(uri).expanduser()
    config = path / "adapter_config.json"
    if not config.is_file():
        raise ModelLoadError(
            f"--lora_path {uri}: no adapter_config.json there; pass a PEFT adapter folder (a LoRA "
            f"stage's --save_path without --merge_lora, or the adapter/ folder beside a merged one)"
        )
    task = json.loads(config.read_text()).get("task_type")
    if task == "SEQ_CLS" and not is_rm:
        raise ModelLoadError(f"--lora_path {uri}: a reward model's (SEQ_CLS) adapter: add --is_rm")
    if task not in (None, "SEQ_CLS") and is_rm:
        raise ModelLoadError(f"--lora_path {uri}: a {task} adapter, not a reward model's: drop --is_rm")
    return path


def combine(cfg: LoraCombinerConfig) -> dict:
    """Load the base (as --pretrain loads), fold the adapter in with PEFT's merge_and_unload and commit
    the merged model with the tokenizer (the adapter folder's, where the training stage saved one,
    else the base's) at --output_path. Returns the manifest."""

    adapter = adapter_dir(cfg.model.lora_path, cfg.model.is_rm)
    base = resolve_model_path(cfg.model.model_path, "--model_path")
    dtype = torch.bfloat16 if cfg.ds.bf16 else "auto"
    tokenizer = AutoTokenizer.from_pretrained(str(adapter) if has_tokenizer(adapter) else base)
    if cfg.model.is_rm:
        model = load_reward_model(base, dtype, "sdpa", tokenizer.pad_token_id, flag="--model_path")
    else:
        model = load_causal_lm(base, dtype, "sdpa", flag="--model_path")
    merged = merge_adapter(model, str(adapter))
    log.info("merged %s into %s", cfg.model.lora_path, cfg.model.model_path)
    state = merged.state_dict()
    if cfg.model.is_rm:  # the head under the name the base's files give it (--value_head_prefix)
        state = export_names(state, getattr(merged.config, "value_head_prefix", HEAD))
    with StagedOutput(cfg.ckpt.output_path) as out:
        check_weights(state, f"--output_path {cfg.ckpt.output_path}")
        save_hf_model(merged, state, tokenizer, out.dir)
        return out.commit({"stage": "lora_combiner", "config": public_dict(cfg)})
