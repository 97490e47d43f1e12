"""What each advantage estimator is, in one place (no torch: the config's choices come from here).

`group`: it baselines each prompt's n samples against each other (needs n_samples_per_prompt >= 2).
`whiten`: its advantages are whitened over the batch (mean 0, std 1 over response tokens).
`critic`: it needs a critic's values.
`loss_agg`: how its per-token losses become the step's loss unless --loss_agg_mode says otherwise
(`alignment.losses.aggregation`). The math is in `alignment.losses.advantages`.
"""

from __future__ import annotations

from dataclasses import dataclass

# how per-token losses become a step's loss (the math: alignment.losses.aggregation)
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


@dataclass(frozen=True)
class Estimator:
    name: str
    group: bool
    whiten: bool
    critic: bool = False
    loss_agg: str = "token-mean"
    paper: str = ""


ESTIMATORS: dict[str, Estimator] = {
    e.name: e
    for e in (
        Estimator("gae", group=False, whiten=True, critic=True, paper="Schulman et al. 2016, arXiv:1506.02438"),
        Estimator("reinforce", group=False, whiten=True, paper="REINFORCE++, Hu 2025, arXiv:2501.03262"),
        Estimator("reinforce_baseline", group=True, whiten=True, paper="REINFORCE++-baseline, Hu 2025"),
        Estimator("rloo", group=True, whiten=False, paper="Ahmadian et al. 2024, arXiv:2402.14740"),
        Estimator("group_norm", group=True, whiten=False, paper="GRPO, Shao et al. 2024, arXiv:2402.03300"),
        # Dr. GRPO removes both length biases: no std division (advantages) and no per-sequence length
        # normalisation (the loss: each sequence's token sum over a constant, generate_max_len)
        Estimator(
            "dr_grpo",
            group=True,
            whiten=False,
            loss_agg="seq-mean-token-sum-norm",
            paper="Liu et al. 2025, arXiv:2503.20783",
        ),
    )
}
