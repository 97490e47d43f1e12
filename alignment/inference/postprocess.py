"""Batch-inference post-processors: scored samples in, training data out. Pure functions over
`Scored` rows, registered by the name `--post_processor` takes (OpenRLHF's rs / iter_dpo / csft).

Rows of one prompt are grouped by the prompt text in first-seen order; ties in reward keep the
earlier sample, so the output is deterministic for a given input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from alignment.config.inference import CsftPrompt


@dataclass(frozen=True)
class Scored:
    input: str  # the prompt as the model saw it (template applied)
    output: str  # the response
    reward: float


def by_prompt(rows: list[Scored]) -> dict[str, list[Scored]]:
    groups: dict[str, list[Scored]] = {}
    for r in rows:
        groups.setdefault(r.input, []).append(r)
    return groups


def rejection_sampling(rows: list[Scored], rs_min_reward: float | None = None, **_: object) -> list[dict]:
    """rs: the highest-reward response of each prompt, as an SFT sample; with `rs_min_reward`,
    only when it scores at least that (a prompt whose best answer is still bad teaches nothing good)."""
    out = []
    for prompt, group in by_prompt(rows).items():
        best = max(group, key=lambda r: r.reward)  # max keeps the first of equal rewards
        if rs_min_reward is None or best.reward >= rs_min_reward:
            out.append({"input": prompt, "output": best.output, "reward": best.reward})
    return out


def iterative_dpo_pairs(rows: list[Scored], **_: object) -> list[dict]:
    """iter_dpo: best vs worst response of each prompt, as a preference pair. Prompts whose
    responses all score the same give no preference and are left out."""
    out = []
    for prompt, group in by_prompt(rows).items():
        best = max(group, key=lambda r: r.reward)
        worst = min(group, key=lambda r: r.reward)
        if best.reward > worst.reward:
            out.append(
                {
                    "prompt": prompt,
                    "chosen": best.output,
                    "rejected": worst.output,
                    "chosen_reward": best.reward,
                    "rejected_reward": worst.reward,
                }
            )
    return out


def conditional_sft(rows: list[Scored], csft_prompt: str = "<rm_score>: {reward:.1f} ", **_: object) -> list[dict]:
    """csft: every sample, its prompt prefixed with its reward, so generation can later ask for
    a high score by starting the prompt with a high one."""
    return [
        {"input": csft_prompt.format(reward=r.reward) + r.input, "output": r.output, "reward": r.reward} for r in rows
    ]


def csft_prefix(generate: CsftPrompt) -> str:
    """What goes before a rendered prompt when generating from (or evaluating) a conditional-SFT model: the
    asked-for score where the csft post-processor wrote the row's own, or nothing without --enable_csft.
    `generate`: a config's generate group (alignment.config.inference.CsftPromptConfig's fields)."""
    return generate.csft_prompt.format(reward=generate.csft_reward) if generate.enable_csft else ""


POST_PROCESSORS: dict[str, Callable[..., list[dict]]] = {
    "rs": rejection_sampling,
    "iter_dpo": iterative_dpo_pairs,
    "csft": conditional_sft,
}
