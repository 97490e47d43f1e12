"""--loss_agg_mode: an optimizer step's gradient is the same however the step is cut into
micro-batches and ranks (the gradient DeepSpeed would form is replayed here: each micro-batch's loss
divided by the G accumulation steps, the D ranks' gradients averaged), and the micro-batch count
all-reduce over 2 gloo ranks gives every rank the step's totals. Whitening on 2 ranks, each holding
half of the batch, equals whitening the whole batch."""

from __future__ import annotations

import pytest
import torch

from alignment.losses.aggregation import StepTotals, aggregate
from alignment.losses.estimators import LOSS_AGG_MODES
from alignment.losses.nll import masked_mean

LENGTHS = [1, 6, 2, 5, 3, 6, 1, 4]  # response lengths: micro-batches hold different token counts
B, T = len(LENGTHS), 6
MASK = torch.tensor([[1.0] * n + [0.0] * (T - n) for n in LENGTHS])


def step_gradient(micro: int, ranks: int, mode: str | None) -> torch.Tensor:
    """The step's gradient with `micro` rows per micro-batch on each of `ranks` ranks. mode None: the
    per-micro-batch masked mean (what the loss was before --loss_agg_mode)."""
    torch.manual_seed(0)
    x = torch.randn(B, T)
    w = torch.zeros(T, requires_grad=True)
    accum = B // (micro * ranks)
    totals = StepTotals(float(MASK.sum()), float(B), float(accum * ranks))
    for start in range(0, B, micro):
        rows = slice(start, start + micro)
        token_loss = (x[rows] * (w + 1.0) - 0.5) ** 2
        loss = (
            masked_mean(token_loss, MASK[rows]) if mode is None else aggregate(token_loss, MASK[rows], mode, totals, T)
        )
        (loss / accum / ranks).backward()  # DeepSpeed: ÷ G, then the mean over the D ranks
    return w.grad.clone()


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_micro_batch_size_and_rank_count_do_not_change_the_step(mode):
    whole = step_gradient(B, 1, mode)
    for micro, ranks in ((1, 1), (2, 1), (4, 1), (2, 2), (1, 4), (4, 2)):
        assert torch.allclose(step_gradient(micro, ranks, mode), whole, atol=1e-6), (mode, micro, ranks)


def test_token_mean_is_the_masked_mean_of_the_whole_step_and_the_old_loss_was_not():
    torch.manual_seed(0)
    x = torch.randn(B, T)
    w = torch.zeros(T, requires_grad=True)
    masked_mean((x * (w + 1.0) - 0.5) ** 2, MASK).backward()
    assert torch.allclose(step_gradient(2, 1, "token-mean"), w.grad, atol=1e-6)
    # the per-micro-batch mean weighs the tokens of short micro-batches more: micro-batching changed it
    assert not torch.allclose(step_gradient(2, 1, None), w.grad, atol=1e-3)


def test_dr_grpo_divides_each_sequence_sum_by_the_constant_length():
    loss = torch.arange(B * T, dtype=torch.float32).view(B, T)
    got = aggregate(loss, MASK, "seq-mean-token-sum-norm", StepTotals.single(MASK), norm_len=16)
    assert got.item() == pytest.approx(((loss * MASK).sum(-1) / 16).mean().item())
    with pytest.raises(ValueError, match="needs norm_len"):
        aggregate(loss, MASK, "seq-mean-token-sum-norm", StepTotals.single(MASK))


def _rank(rank: int, port: int, out) -> None:
    import os
    from types import SimpleNamespace

    import torch.distributed as dist

    from alignment.config.ppo import PPOConfig
    from alignment.ppo.batch import SequenceBatch
    from alignment.ppo.experience import Experience
    from alignment.ppo.rank_ops import _steps

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    # rank r holds rows r*4 .. r*4+3 (a contiguous shard); 2 micro-batches of 2 = 1 step of G=2
    idx = list(range(rank * 4, rank * 4 + 4))
    mask = MASK[idx]
    seq = torch.zeros(4, T + 1, dtype=torch.long)
    exp = Experience(
        SequenceBatch(seq, torch.ones_like(seq), mask, idx),
        None,
        None,
        None,
        torch.zeros(4, T),
        torch.zeros(4, T),
        torch.zeros(4),
        torch.zeros(4, T),
    )
    engine = SimpleNamespace(gradient_accumulation_steps=lambda: 2, autotp_size=lambda: 0, module=torch.nn.Linear(1, 1))
    cfg = PPOConfig(pretrain="x", prompt_data="y", max_epochs=1, micro_train_batch_size=2)
    out.put((rank, [(len(m.exp), m.totals) for m in _steps(engine, exp, cfg.train, seed=0)]))
    dist.destroy_process_group()


def on_two_ranks(target) -> dict:
    """{rank: what target(rank, port, queue) put} from 2 spawned gloo ranks."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    got = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return got


def test_step_totals_count_every_rank():
    got = on_two_ranks(_rank)
    expected = StepTotals(float(MASK.sum()), float(B), 4.0)  # all 8 rows, G·D = 2·2
    for rank in (0, 1):
        assert [t for _, t in got[rank]] == [expected, expected] and [n for n, _ in got[rank]] == [2, 2]


def _whiten_rank(rank: int, port: int, out) -> None:
    import os

    import torch.distributed as dist

    from alignment.distributed.collectives import sum_across_ranks
    from alignment.losses.advantages import advantages_and_returns

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    rewards, _ = _batch()
    half = slice(rank * 4, rank * 4 + 4)
    adv, _ = advantages_and_returns("reinforce_baseline", rewards[half], MASK[half], 2, across=sum_across_ranks)
    out.put((rank, adv))
    dist.destroy_process_group()


def _batch() -> tuple[torch.Tensor, None]:
    torch.manual_seed(1)
    rank_skew = torch.tensor([[0.0]] * 4 + [[3.0]] * 4)  # rank 1's rows score higher: local stats would differ
    return (torch.randn(B, T) + rank_skew) * MASK, None


def test_whitening_on_two_ranks_equals_whitening_the_whole_batch():
    from alignment.losses.advantages import advantages_and_returns

    rewards, _ = _batch()
    whole, _ = advantages_and_returns("reinforce_baseline", rewards, MASK, 2)
    got = on_two_ranks(_whiten_rank)
    assert torch.allclose(torch.cat([got[0], got[1]]), whole, atol=1e-5)
    local, _ = advantages_and_returns("reinforce_baseline", rewards[:4], MASK[:4], 2)
    assert not torch.allclose(local, whole[:4], atol=1e-3)  # per-rank whitening (the old way) differs
