"""Running reward normalisation: r' = (r − mean) / std over every reward seen so far, this batch's included
(Chan et al.'s parallel update of count, mean and the sum of squared deviations; TRL's RunningMoments does the
same). `--normalize_reward` means this when the rewards come from a source that saved no statistics of its own
— an agent's environment, a reward_func file or a server; a trained RM's are normalised by the mean/std its
training saved instead (alignment/rewards/scorer.py).
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

import torch

EPS = 1e-8


@dataclass
class RunningMoments:
    count: float = 0.0
    mean: float = 0.0
    m2: float = 0.0  # sum of squared deviations from the mean

    def update(self, x: torch.Tensor) -> None:
        """x: [B] rewards."""
        n, m = float(x.numel()), x.double().mean().item()
        if n == 0:
            return
        m2 = ((x.double() - m) ** 2).sum().item()
        total = self.count + n
        delta = m - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta**2 * self.count * n / total
        self.count = total

    @property
    def std(self) -> float:
        return (self.m2 / (self.count - 1)) ** 0.5 if self.count > 1 else 1.0

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """Update with x, then x normalised by the moments (x's own included)."""
        self.update(x)
        return ((x.double() - self.mean) / (self.std + EPS)).to(x.dtype)

    def state(self) -> list[float]:
        return list(astuple(self))
