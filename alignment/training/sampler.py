"""Deterministic, resumable data order: a seeded permutation per epoch, sharded by rank.

Resuming at (epoch, micro-batch k) yields exactly the micro-batches an uninterrupted run
would have seen from k on, which is what makes resume equivalence hold.
"""

from __future__ import annotations

import random


def epoch_order(num_samples: int, seed: int, epoch: int) -> list[int]:
    order = list(range(num_samples))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


def micro_batches(
    num_samples: int, micro_batch_size: int, rank: int, world_size: int, seed: int, epoch: int, start: int = 0
) -> list[list[int]]:
    """This rank's micro-batches (sample indices) for `epoch`, skipping the first `start`.

    Every rank gets the same count (the tail that doesn't fill a micro-batch on every rank is
    dropped), so collective ops stay in step.
    """
    per_round = micro_batch_size * world_size
    order = epoch_order(num_samples, seed, epoch)
    rounds = len(order) // per_round
    batches = []
    for r in range(rounds):
        chunk = order[r * per_round : (r + 1) * per_round]
        batches.append(chunk[rank * micro_batch_size : (rank + 1) * micro_batch_size])
    return batches[start:]


def micro_batches_per_epoch(num_samples: int, micro_batch_size: int, world_size: int) -> int:
    return num_samples // (micro_batch_size * world_size)
