"""Pack variable-length samples into rows without letting them see each other.

A packed row keeps each sample's own position ids (restarting at 0) and a block-diagonal
causal mask, so the packed forward pass — and the loss — equal the unpacked ones.
With a dense mask (SDPA, eager) attention costs T² per row whatever the mask hides, so samples
go into several rows of at most --max_len tokens (first-fit decreasing, TRL's "bfd"); without
one (flash-attention's varlen path) a micro-batch is one row.
"""

from __future__ import annotations

import torch


def block_causal_mask(seg: torch.Tensor, dtype: torch.dtype = torch.bool) -> torch.Tensor:
    """[B, T] segment ids -> [B, 1, T, T] mask: token i attends to j iff same segment and j <= i.

    bool (True = attend) for SDPA; a float dtype gives the additive form eager attention adds.
    """
    return as_mask(seg[:, :, None] == seg[:, None, :], dtype)


def branch_causal_mask(unit: torch.Tensor, branch: torch.Tensor, dtype: torch.dtype = torch.bool) -> torch.Tensor:
    """[B, T] unit index and branch of each token (0: the unit's shared prompt, k > 0: its k-th
    response) -> [B, 1, T, T]: token i attends to j iff same unit, j <= i, and j is on the prompt or
    on i's branch. Responses packed after one prompt so never see each other."""
    same = unit[:, :, None] == unit[:, None, :]
    visible = (branch[:, None, :] == 0) | (branch[:, :, None] == branch[:, None, :])
    return as_mask(same & visible, dtype)


def as_mask(allowed: torch.Tensor, dtype: torch.dtype = torch.bool) -> torch.Tensor:
    """[B, T, T] "i may see j" (before causality) -> [B, 1, T, T] causal mask in `dtype`'s form."""
    t = allowed.shape[-1]
    allowed = (allowed & torch.ones(t, t, dtype=torch.bool, device=allowed.device).tril())[:, None]
    if dtype == torch.bool:
        return allowed
    return torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)


def first_fit_rows(lengths: list[int], capacity: int) -> list[list[int]]:
    """Sample indices per row: longest first, each into the first row it fits (rows <= capacity,
    or one sample when it alone is longer)."""
    rows: list[list[int]] = []
    free: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        row = next((r for r, room in enumerate(free) if lengths[i] <= room), None)
        if row is None:
            rows.append([])
            free.append(max(capacity, lengths[i]))
            row = len(rows) - 1
        rows[row].append(i)
        free[row] -= lengths[i]
    return rows
