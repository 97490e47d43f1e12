"""Per-token KL estimators between the policy and the reference, and the KL coefficient controllers.

With log r = log π(x) − log π_ref(x) on tokens sampled from π (Schulman 2020, "Approximating KL
divergence", http://joschu.net/blog/kl-approx.html):
    k1 = log r              unbiased, high variance, can be negative
    k2 = (log r)² / 2       biased, low variance
    k3 = (1/r − 1) + log r  unbiased, low variance, always ≥ 0
Adaptive controller: Ziegler et al. 2019 ("Fine-Tuning Language Models from Human Preferences"), eq. 2.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k1") -> torch.Tensor:
    """[B, T] -> [B, T]."""
    log_ratio = logp.float() - ref_logp.float()
    if kind == "k1":
        return log_ratio
    if kind == "k2":
        return log_ratio**2 / 2.0
    if kind == "k3":
        return torch.exp(-log_ratio) - 1.0 + log_ratio
    raise ValueError(f"unknown KL estimator {kind!r}: use k1, k2 or k3")


@dataclass
class KLController:
    """β for the KL penalty. Fixed unless `target` is set; then β follows the measured KL."""

    value: float
    target: float | None = None
    horizon: int = 10000

    def update(self, current_kl: float, n_steps: int) -> None:
        if self.target is None:
            return
        error = max(-0.2, min(0.2, current_kl / self.target - 1.0))
        self.value *= 1.0 + error * n_steps / self.horizon
