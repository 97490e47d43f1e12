"""Which prompts dynamic sampling need not draw again: a per-prompt history of groups that taught nothing.

DAPO's filter (alignment.ppo.dynamic_sampling) drops a group whose samples all scored alike, after paying for
its generation. Once a policy answers most prompts right, most groups are dropped: on the tiny world ~80 % of
what an iteration generated never reached a gradient. A prompt whose last group was all right (or all wrong)
is likely to be so again, so, as GRESO does (Zheng et al. 2025, "Act Only When It Pays", arXiv:2506.02177),
prompts are drawn by their history: one whose last k groups in a row taught nothing is drawn with probability
recheck**k, so it is still checked now and then, and one whose group was mixed at its last draw always is.

Pure bookkeeping: the streaks per prompt (by position in the prompt pool) and seeded draws over them. The
streaks travel in the PPO checkpoint, so a resumed run draws what the uninterrupted one would have.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class PassHistory:
    recheck: float  # a prompt k groups in a row without signal is drawn with probability recheck**k
    streaks: dict[int, int] = field(default_factory=dict)  # pool position -> groups in a row that taught nothing

    def record(self, outcomes: list[tuple[int, bool]]) -> None:
        """(pool position, the group taught something) for each scored group, in order."""
        for position, mixed in outcomes:
            if mixed:
                self.streaks.pop(position, None)
            else:
                self.streaks[position] = self.streaks.get(position, 0) + 1

    def drawn(self, position: int, rng: random.Random) -> bool:
        """Whether a prompt is drawn now (one draw of `rng` per prompt with a streak, none for the others)."""
        k = self.streaks.get(position, 0)
        return k == 0 or rng.random() < self.recheck**k

    def pick(self, candidates: list[int], k: int, rng: random.Random) -> list[int]:
        """Up to k of `candidates` (positions, in the order offered) that are drawn; when too few are, the
        skipped ones fill the rest in order, so a pool that is all solved still yields a batch."""
        chosen, skipped = [], []
        for position in candidates:
            if len(chosen) == k:
                break
            (chosen if self.drawn(position, rng) else skipped).append(position)
        return chosen + skipped[: k - len(chosen)]

    def state(self) -> list[list[int]]:
        return sorted([p, k] for p, k in self.streaks.items())

    @staticmethod
    def restored(recheck: float, state: list[list[int]]) -> "PassHistory":
        return PassHistory(recheck, {int(p): int(k) for p, k in state})


def token_share(used: int, generated: int) -> float:
    """The share of generated response tokens that reach a gradient (1.0 when nothing was generated)."""
    return used / generated if generated else 1.0
