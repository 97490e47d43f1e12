"""--use_dynamic_batch: cut a batch into micro-batches by a token budget instead of a row count.

A fixed row count pads every row of a micro-batch to its longest one, so one long response makes
the whole micro-batch as wide; a token budget puts rows of similar length together, as many as fit.
The rows are sorted longest first and filled greedily. A micro-batch costs what its forward pass
computes: rows x longest row when right-padded, the sum of its rows' tokens when packed
(--packing_samples). Pure index arithmetic; alignment/ppo/rank_ops.py runs the passes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenBudget:
    max_tokens: int  # most tokens one forward pass computes (OpenRLHF's --*_max_tokens_per_gpu)
    packed: bool  # --packing_samples: a micro-batch costs its real tokens, not rows x longest

    def cost(self, lengths: list[int]) -> int:
        return sum(lengths) if self.packed else len(lengths) * max(lengths, default=0)

    def groups(self, lengths: list[int]) -> list[list[int]]:
        """Indices of `lengths` cut into micro-batches that each cost at most max_tokens (a row longer
        than the budget goes alone, as OpenRLHF's dynamic batches: nothing is truncated)."""
        order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
        groups: list[list[int]] = []
        for i in order:
            if groups and self.cost([lengths[j] for j in groups[-1]] + [lengths[i]]) <= self.max_tokens:
                groups[-1].append(i)
            else:
                groups.append([i])
        return groups


def split_to(groups: list[list[int]], n: int) -> list[list[int]]:
    """`groups` split until there are n: the one with the most rows is halved each time (halving only
    lowers a group's cost). Ranks that train together must run as many micro-batches (ZeRO's
    gradient reductions and ZeRO-3's parameter gathers are collective), so every rank splits up to
    the largest count among them; n may not exceed the rows."""
    out = [list(g) for g in groups]
    if n > sum(map(len, out)):
        raise ValueError(f"cannot cut {sum(map(len, out))} rows into {n} micro-batches")
    while len(out) < n:
        k = max(range(len(out)), key=lambda j: len(out[j]))
        g = out.pop(k)
        out[k:k] = [g[: len(g) // 2], g[len(g) // 2 :]]
    return out
