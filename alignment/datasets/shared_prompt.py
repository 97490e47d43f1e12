"""Preference pairs packed over their shared prompt: one row segment [prompt | chosen tail | rejected tail].

Chosen and rejected start with the same prompt, so a pair's prompt is computed once instead of twice
(on the tiny world's pairs about a quarter of a DPO step's tokens). The mask keeps the two tails
apart: a rejected token attends to the prompt and to earlier rejected tokens, never to the chosen
tail, and its position ids continue from the prompt's. So every token sees what it sees in its own
sequence and the log-probs, rewards and losses equal those of chosen and rejected packed apart
(tests/test_shared_prompt.py). One token per pair reads its logits from elsewhere: the rejected
tail's first token is predicted at the prompt's last position, not at the chosen tail's last;
`Batch.branches` lists those positions for `sequence_logps`.

It needs a dense mask (SDPA, eager attention): flash-attention's varlen path knows only whole
sequences, so with --flash_attn pairs are packed as two sequences (datasets.preference.collate_pairs).
"""

from __future__ import annotations

import torch

from alignment.datasets.batch import Batch, TokenizedSample
from alignment.datasets.packing import branch_causal_mask, first_fit_rows

PROMPT, CHOSEN, REJECTED = 0, 1, 2


def shared_prefix(chosen: TokenizedSample, rejected: TokenizedSample) -> int:
    """How many leading tokens the two share: prompt tokens only (no training target), and each tail
    keeps at least one token."""
    limit = min(len(chosen.input_ids), len(rejected.input_ids)) - 1
    n = 0
    while (
        n < limit
        and chosen.input_ids[n] == rejected.input_ids[n]
        and not chosen.loss_mask[n]
        and not rejected.loss_mask[n]
    ):
        n += 1
    return n


def collate_shared(
    chosen: list[TokenizedSample], rejected: list[TokenizedSample], mask_dtype: torch.dtype, row_tokens: int | None
) -> Batch:
    """N pairs -> rows of [prompt | chosen tail | rejected tail] units, first-fit into rows of at most
    `row_tokens` tokens. Samples 0..N-1 are the chosen, N..2N-1 the rejected (as collate_packed)."""
    n = len(chosen)
    prefix = [shared_prefix(c, r) for c, r in zip(chosen, rejected)]
    units = [len(c.input_ids) + len(r.input_ids) - k for c, r, k in zip(chosen, rejected, prefix)]
    rows = first_fit_rows(units, row_tokens or sum(units))
    width = max(sum(units[i] for i in row) for row in rows)
    ids, loss, pos = (torch.zeros((len(rows), width), dtype=torch.long) for _ in range(3))
    seg, pair, branch = torch.full_like(ids, -1), torch.full_like(ids, -1), torch.zeros_like(ids)
    branches = []
    for r, row in enumerate(rows):
        col = 0
        for i in row:
            c, rj, k = chosen[i], rejected[i], prefix[i]
            lc, lr = len(c.input_ids), len(rj.input_ids)
            tail = slice(col + lc, col + lc + lr - k)
            ids[r, col : col + lc], ids[r, tail] = torch.tensor(c.input_ids), torch.tensor(rj.input_ids[k:])
            loss[r, col : col + lc], loss[r, tail] = torch.tensor(c.loss_mask), torch.tensor(rj.loss_mask[k:])
            pos[r, col : col + lc], pos[r, tail] = torch.arange(lc), torch.arange(k, lr)
            seg[r, col : col + lc], seg[r, tail] = i, n + i
            branch[r, col + k : col + lc], branch[r, tail] = CHOSEN, REJECTED
            pair[r, col : col + units[i]] = i
            if k:
                branches.append((r, col + lc, col + k - 1))
            col += units[i]
    lengths = [len(s.input_ids) for s in chosen + rejected]
    return Batch(
        ids,
        loss,
        branch_causal_mask(pair, branch, mask_dtype),
        pos,
        2 * n,
        lengths,
        seg,
        torch.tensor(branches, dtype=torch.long).reshape(-1, 3),
    )
