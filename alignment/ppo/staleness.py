"""How old the samples an update trains on are (--async_train): per sample, the weight updates between the
policy that began its response and the one being trained (--partial_rollout_enable: the response's first
token; later tokens may be newer, train/partial/*). Reported as a distribution, since one stale straggler
hides in a mean."""

from __future__ import annotations


def staleness_metrics(lags: list[int], bound: int) -> dict[str, float]:
    """`staleness/{mean,max}` and, for each lag 0..bound, the share of samples that old (`staleness/lag_k`);
    a lag past the bound shows as max > bound and shares summing below 1."""
    if not lags:
        return {}
    out = {"staleness/mean": sum(lags) / len(lags), "staleness/max": float(max(lags))}
    out.update({f"staleness/lag_{k}": sum(lag == k for lag in lags) / len(lags) for k in range(bound + 1)})
    return out
