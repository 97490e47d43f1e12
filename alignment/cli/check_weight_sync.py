"""python -m alignment.cli.check_weight_sync --pretrain DIR --engine vllm|hf

Does a rollout engine generate with the trainer's weights after a sync? Loads the policy as
the trainer holds it, moves it with a few optimizer steps (so the greedy answers change), sends
the new weights to a separately started engine in bounded chunks — the path PPO uses after every
update — and compares greedy outputs on held-out prompts with the trainer's own `generate`.
Also measures the engine's sampled-generation throughput. Prints one JSON line; exits 1 when
any output differs. Run it on GPU machines to check the vLLM path there.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time

log = logging.getLogger("alignment.check_weight_sync")


def perturb(model, steps: int, lr: float, seed: int) -> None:
    """A few Adam steps of next-token loss on random token sequences: a real update, cheaply."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        ids = torch.randint(0, model.config.vocab_size, (8, 24), generator=gen)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pretrain", required=True, help="Policy checkpoint (a directory in HF format)")
    p.add_argument("--engine", choices=("vllm", "hf"), default="vllm")
    p.add_argument("--prompts", type=int, default=16, help="Held-out prompts compared greedily")
    p.add_argument("--max_new_tokens", type=int, default=16)
    p.add_argument("--chunk_mb", type=float, default=1.0, help="Most megabytes per sync chunk")
    p.add_argument(
        "--sync",
        choices=("chunks", "gloo"),
        default="chunks",
        help="chunks: shards through memory (the object-store path); gloo (vLLM only): the collective "
        "broadcast PPO uses with --vllm_sync_backend gloo, a thread here playing actor rank 0",
    )
    p.add_argument("--update_steps", type=int, default=3)
    p.add_argument("--update_lr", type=float, default=3e-3)
    p.add_argument("--throughput_prompts", type=int, default=64, help="Prompts x 4 samples timed (0: skip)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.sync == "gloo" and a.engine != "vllm":
        p.error("--sync gloo: the collective broadcast goes to vLLM engines; use --engine vllm")
    return a


def start_engine(a: argparse.Namespace, tok):
    """The engine under test, started from --pretrain (vLLM, or the batched HF engine on its own copy)."""
    import torch

    from alignment.models.loading import load_causal_lm
    from alignment.rollout.hf_engine import HFEngine

    if a.engine == "vllm":
        from alignment.rollout.vllm_engine import VLLMEngine, vllm_missing_reason

        reason = vllm_missing_reason("--engine vllm", "--engine hf")
        if reason:
            raise SystemExit(f"error: {reason}")
        return VLLMEngine(a.pretrain, max_model_len=256, seed=a.seed, cpu=not torch.cuda.is_available())
    return HFEngine(load_causal_lm(a.pretrain, torch.float32, "sdpa"), tok.eos_token_id, tok.pad_token_id)


def main(argv: list[str] | None = None) -> dict:
    a = parse(argv)
    import torch

    from alignment.datasets.formatting import prompt_text
    from alignment.models.loading import load_causal_lm, load_tokenizer
    from alignment.rollout.hf_engine import HFEngine
    from alignment.rollout.types import SamplingParams
    from alignment.rollout.weight_sync import chunks
    from alignment.tiny_world.paths import tiny_dir

    tok = load_tokenizer(a.pretrain, None)
    rows = [json.loads(line) for line in (tiny_dir() / "prompts" / "test.jsonl").read_text().splitlines()]
    prompts = [
        tok(prompt_text(tok, r["context_messages"], True, None), add_special_tokens=False)["input_ids"]
        for r in rows[: max(a.prompts, a.throughput_prompts)]
    ]
    greedy = SamplingParams(a.max_new_tokens, greedy=True)
    engine = start_engine(a, tok)

    trainer = load_causal_lm(a.pretrain, torch.float32, "sdpa")
    before = engine.generate(prompts[: a.prompts], greedy).response_ids
    perturb(trainer, a.update_steps, a.update_lr, a.seed)
    expected = HFEngine(trainer, tok.eos_token_id, tok.pad_token_id).generate(prompts[: a.prompts], greedy).response_ids
    state = {k: v.detach().clone() for k, v in trainer.state_dict().items()}
    max_bytes = int(a.chunk_mb * (1 << 20))
    t0 = time.time()
    parts = list(chunks(state, max_bytes))
    if a.sync == "gloo":
        collective_sync(engine, state)
    elif a.engine == "vllm":
        engine.load_weight_chunks(parts)
    else:
        engine.load_weights(item for part in parts for item in part.items())
    sync_s = time.time() - t0
    after = engine.generate(prompts[: a.prompts], greedy).response_ids

    result = {
        "engine": a.engine,
        "prompts": a.prompts,
        "equal_after_sync": sum(x == y for x, y in zip(after, expected)),
        "changed_by_update": sum(x != y for x, y in zip(before, expected)),
        "sync": a.sync,
        "chunks": len(parts),
        "largest_chunk_bytes": max(sum(t.numel() * t.element_size() for t in c.values()) for c in parts),
        "sync_seconds": round(sync_s, 3),
    }
    if a.throughput_prompts:
        sampled = SamplingParams(a.max_new_tokens, temperature=1.0, n=4, seed=a.seed)
        t0 = time.time()
        out = engine.generate(prompts[: a.throughput_prompts], sampled)
        result["sampled_tokens_per_s"] = round(out.response_tokens() / (time.time() - t0), 1)
    print(json.dumps(result), flush=True)
    if result["equal_after_sync"] != a.prompts:
        sys.exit(1)
    return result


def collective_sync(engine, state) -> None:
    """The engine joins a 2-member gloo group as rank 1 while a thread, as actor rank 0, broadcasts."""

    import torch

    from alignment.rollout import collective_sync as cs

    store = cs.listen("127.0.0.1", 2)
    group = cs.SyncGroup("127.0.0.1", store.port, 2, "gloo")
    errors: list[BaseException] = []

    def root() -> None:
        try:
            cs.broadcast(cs.open_group(group, 0, store), state, torch.device("cpu"))
        except BaseException as e:  # noqa: BLE001 - re-raised below, in the main thread
            errors.append(e)

    sender = threading.Thread(target=root)
    sender.start()
    engine.join_sync_group(group, 1)
    loaded = engine.receive_weights(cs.specs(state))
    sender.join()
    if errors:
        raise errors[0]
    if loaded != len(state):
        raise SystemExit(f"error: the engine loaded {loaded} of {len(state)} broadcast tensors")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    main()
