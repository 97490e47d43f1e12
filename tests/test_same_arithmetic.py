"""The restructurings move code, not arithmetic. A short PPO (GAE: actor, critic, reference and a
reward_func that varies from the start, in process, from the seeded tiny base) logs per step the figures
recorded before the restructuring of 2026-11-29 (tests/data/arithmetic.json, written by this file's
recording mode at commit bd80903: `python tests/test_same_arithmetic.py OUT.json` in that checkout). The
2-rank SFT of tests/test_ray_ranks.py is held to its figures there ("sft_2_ranks", recorded at bd80903 with
that test's torchrun command), and train_ppo_ray to train_ppo's losses in tests/test_ppo_ray.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "data" / "arithmetic.json"
TINY = REPO / "data" / "tiny"  # the same files before and after the layout moved
PPO = ["--prompt_data", f"json@{TINY / 'prompts'}", "--input_key", "context_messages", "--label_key", "label",
       "--apply_chat_template", "--remote_rm_url", str(REPO / "tests/data/length_reward.py"),
       "--advantage_estimator", "gae",
       "--n_samples_per_prompt", "2", "--rollout_batch_size", "8", "--micro_rollout_batch_size", "8",
       "--train_batch_size", "16", "--micro_train_batch_size", "8", "--max_samples", "16", "--generate_max_len", "8",
       "--actor_learning_rate", "1e-4", "--critic_learning_rate", "1e-4", "--init_kl_coef", "0.01", "--seed", "7",
       "--logging_steps", "1", "--num_episodes", "2"]  # fmt: skip
PPO_KEYS = ("train/policy_loss", "train/value_loss", "train/reward", "train/kl", "train/approx_kl",
            "train/response_length")  # fmt: skip


def golden(name: str) -> list[float]:
    return json.loads(GOLDEN.read_text())[name]


def ppo_figures(base: Path, out: Path) -> dict[str, list[float]]:
    from tests.conftest import metric_rows, run_module

    run_module("alignment.cli.train_ppo", [*PPO, "--pretrain", str(base), "--save_path", str(out / "ppo")])
    rows = metric_rows(out / "ppo")
    return {k: [r[k] for r in rows if k in r] for k in PPO_KEYS}


@pytest.mark.integration
def test_ppo_logs_the_figures_recorded_before_the_restructuring(tiny_base, tmp_path):
    got = ppo_figures(tiny_base, tmp_path)
    for name in PPO_KEYS:
        want = golden(name)
        assert len(got[name]) == len(want) > 0, (name, got[name])
        assert got[name] == pytest.approx(want, rel=1e-5, abs=1e-6), (name, got[name], want)


if __name__ == "__main__":  # record the figures of this checkout: python tests/test_same_arithmetic.py OUT.json
    import tempfile

    sys.path.insert(0, str(REPO))
    from alignment.tiny_world.base_model import make_base  # as the tiny_base fixture makes it

    work = Path(tempfile.mkdtemp())
    make_base(work / "base", seed=0)
    Path(sys.argv[1]).write_text(json.dumps(ppo_figures(work / "base", work), indent=1) + "\n")
