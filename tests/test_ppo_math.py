"""PPO-family math on numbers computed by hand (written out here)."""

import math
from dataclasses import replace

import pytest
import torch

from alignment.config.ppo import PPOConfig
from alignment.losses.advantages import GROUP_BASELINES, gae, reinforce_returns, whiten
from alignment.losses.kl import KLController, kl_estimate
from alignment.losses.ppo import policy_loss, value_loss

T = torch.tensor


def approx(x, expected, abs=1e-5):
    assert torch.as_tensor(x).flatten().tolist() == pytest.approx(list(expected), abs=abs)


def test_gae_by_hand():
    r, v, m = T([[0.0, 0.0, 1.0]]), T([[0.5, 0.6, 0.7]]), torch.ones(1, 3)
    adv, ret = gae(r, v, m, gamma=1.0, lambd=1.0)
    approx(adv, [0.5, 0.4, 0.3])  # δ = 0.1, 0.1, 0.3 summed backwards
    approx(ret, [1.0, 1.0, 1.0])
    adv, _ = gae(r, v, m, gamma=0.9, lambd=0.5)
    approx(adv, [0.11425, 0.165, 0.3])  # δ = 0.04, 0.03, 0.3; γλ = 0.45
    # a padded position contributes nothing: reward and value there are ignored
    adv, _ = gae(T([[0.0, 1.0, 5.0]]), T([[0.5, 0.6, 0.9]]), T([[1.0, 1.0, 0.0]]), 1.0, 1.0)
    approx(adv, [0.5, 0.4, 0.0])


def test_reinforce_and_group_baselines():
    approx(reinforce_returns(T([[0.0, 0.0, 1.0]]), torch.ones(1, 3), gamma=0.5), [0.25, 0.5, 1.0])
    scores = T([[1.0, 0.0, 0.0, 1.0]])
    approx(GROUP_BASELINES["reinforce_baseline"](scores), [0.5, -0.5, -0.5, 0.5])
    approx(GROUP_BASELINES["dr_grpo"](scores), [0.5, -0.5, -0.5, 0.5])
    approx(GROUP_BASELINES["rloo"](scores), [2 / 3, -2 / 3, -2 / 3, 2 / 3])  # 1 − 1/3, 0 − 2/3
    approx(GROUP_BASELINES["group_norm"](scores), [0.866025, -0.866025, -0.866025, 0.866025])  # 0.5 / √(1/3)
    approx(whiten(T([[1.0, 3.0, 9.0]]), T([[1.0, 1.0, 0.0]])), [-1.0, 1.0, 0.0])


def test_kl_estimators():
    logp, ref = T([0.0]), T([math.log(2.0)])  # log r = −0.693147
    approx(kl_estimate(logp, ref, "k1"), [-0.693147])
    approx(kl_estimate(logp, ref, "k2"), [0.240227])  # 0.693147² / 2
    approx(kl_estimate(logp, ref, "k3"), [0.306853])  # 2 − 1 − 0.693147
    with pytest.raises(ValueError, match="k1, k2 or k3"):
        kl_estimate(logp, ref, "k4")
    ctl = KLController(0.1, target=6.0, horizon=10000)
    ctl.update(current_kl=12.0, n_steps=100)  # error clipped to 0.2: × (1 + 0.2·100/10000)
    assert ctl.value == pytest.approx(0.1002)
    fixed = KLController(0.1)
    fixed.update(12.0, 100)
    assert fixed.value == 0.1


def test_policy_loss_clip_and_dual_clip():
    one = torch.ones(1)
    loss, frac = policy_loss(T([math.log(1.5)]), T([0.0]), T([1.0]), one)
    assert loss.item() == pytest.approx(-1.2) and frac.item() == 1.0  # min(1.5, 1.2)
    loss, _ = policy_loss(T([math.log(1.5)]), T([0.0]), T([1.0]), one, eps_high=0.28)
    assert loss.item() == pytest.approx(-1.28)
    loss, _ = policy_loss(T([math.log(1.5)]), T([0.0]), T([-1.0]), one)
    assert loss.item() == pytest.approx(1.5)  # min(−1.5, −1.2)
    loss, _ = policy_loss(T([math.log(5.0)]), T([0.0]), T([-1.0]), one)
    assert loss.item() == pytest.approx(5.0)
    loss, _ = policy_loss(T([math.log(5.0)]), T([0.0]), T([-1.0]), one, dual_clip=3.0)
    assert loss.item() == pytest.approx(3.0)  # bounded at −c·A
    # a log-ratio of 200 (exp overflows fp32): clamped at 20 before exp, so the loss stays finite
    far = T([200.0]).requires_grad_()
    loss, _ = policy_loss(far, T([0.0]), T([-1.0]), one)
    loss.backward()
    assert math.isfinite(loss.item()) and loss.item() == pytest.approx(math.exp(20.0)) and far.grad.item() == 0.0


def test_value_loss_clip():
    v, old, ret, m = T([1.0]), T([0.0]), T([2.0]), torch.ones(1)
    assert value_loss(v, old, ret, m).item() == pytest.approx(0.5)  # ½(1 − 2)²
    assert value_loss(v, old, ret, m, value_clip=0.2).item() == pytest.approx(1.62)  # ½·max(1, (0.2 − 2)²)


def test_advantages_dispatch_group_estimator_by_hand():
    from alignment.losses.advantages import advantages_and_returns

    # one prompt, two samples; per-token rewards: row sums 1.0 and 0.0
    rewards = torch.tensor([[0.0, 1.0], [-0.5, 0.5]])
    mask = torch.ones(2, 2)
    adv, ret = advantages_and_returns("rloo", rewards, mask, n_samples=2)
    # rloo scores: 1 - 0 = 1 and 0 - 1 = -1; the difference to the raw sum (0 and +1) comes off the
    # last token: row 0 rewards [0, 1] -> [0, 1]; row 1 [-0.5, 0.5 - 1] = [-0.5, -0.5]; reward-to-go:
    assert torch.allclose(adv, torch.tensor([[1.0, 1.0], [-1.0, -0.5]]))
    assert torch.equal(adv, ret)
    with pytest.raises(ValueError, match="needs groups of n_samples >= 2"):
        advantages_and_returns("group_norm", rewards, mask, n_samples=1)
    with pytest.raises(ValueError, match="gae needs the critic's values"):
        advantages_and_returns("gae", rewards, mask, n_samples=1)
    w, _ = advantages_and_returns("reinforce", rewards, mask, n_samples=1)
    assert abs(w.mean().item()) < 1e-6  # whitened


def test_forward_passes_skipped_only_when_they_change_nothing():
    """No KL term: no reference forward (KL 0); one optimizer step per rollout too: no old-log-prob
    forward, and the ratio against the detached new log-probs is 1 (gradient = advantage-weighted)."""
    from alignment.ppo.experience import needs_old_logprobs, uses_reference

    cfg = PPOConfig(
        pretrain="x",
        prompt_data="y",
        init_kl_coef=0.0,
        use_kl_loss=False,
        kl_target=None,
        max_epochs=1,
        rollout_batch_size=16,
        n_samples_per_prompt=8,
        train_batch_size=128,
    )
    assert not uses_reference(cfg.algo) and not needs_old_logprobs(cfg)
    for change in ({"init_kl_coef": 0.01}, {"use_kl_loss": True}, {"kl_target": 0.1}):
        assert uses_reference(replace(cfg, **change).algo)
    for change in ({"max_epochs": 2}, {"train_batch_size": 64}, {"init_kl_coef": 0.01}):
        assert needs_old_logprobs(replace(cfg, **change))
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss, clipfrac = policy_loss(logp, logp.detach(), T([[1.0, 1.0]]), torch.ones(1, 2), 0.2, 0.2, None)
    loss.backward()
    assert clipfrac.item() == 0 and loss.item() == pytest.approx(-1.0)
    approx(logp.grad, [-0.5, -0.5])


def test_kl_is_reported_only_when_measured():
    """Without a reference forward the KL row is absent (not a 0 that reads as 'no drift');
    with one it is the summed k1 estimate."""
    from alignment.ppo.batch import SequenceBatch
    from alignment.ppo.experience import assemble, experience_metrics

    cfg = PPOConfig(
        pretrain="x",
        prompt_data="y",
        kl_estimator="k1",
        use_kl_loss=False,
        advantage_estimator="group_norm",
        n_samples_per_prompt=2,
        gamma=1.0,
        lambd=1.0,
    )
    batch = SequenceBatch(
        torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.long), torch.ones(2, 2), [0, 0]
    )
    scores, old = T([1.0, 0.0]), T([[-1.0, -1.0], [-1.0, -1.0]])
    assert "kl" not in experience_metrics(assemble(cfg, batch, scores, None, None, None, 0.0), [True, True])
    measured = experience_metrics(assemble(cfg, batch, scores, old, old - 0.25, None, 0.0), [True, True])
    assert measured["kl"] == pytest.approx(0.5)


def test_critic_reads_values_in_the_normalised_reward_units(tmp_path):
    """Under --normalize_reward the critic (initialised from the RM) predicts (v − mean)/std with the
    RM's stats, like the rewards it is regressed on; without stats or the flag, raw values."""
    import json

    from alignment.models.reward_model import ValueCapture, critic_value_scale

    (tmp_path / "config.json").write_text(json.dumps({"mean": 2.0, "std": 4.0}))
    assert critic_value_scale(tmp_path, True) == (2.0, 4.0) and critic_value_scale(tmp_path, False) is None
    (tmp_path / "config.json").write_text(json.dumps({}))
    assert critic_value_scale(tmp_path, True) is None

    class Critic(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.score = torch.nn.Linear(1, 1, bias=False)
            torch.nn.init.constant_(self.score.weight, 1.0)

        def forward(self, x):
            return self.score(x)

    x = torch.tensor([[[6.0], [10.0]]])  # [B=1, T=2, 1] -> head output 6, 10
    raw, scaled = Critic(), Critic()
    cap_raw, cap_scaled = ValueCapture(raw), ValueCapture(scaled, (2.0, 4.0))
    raw(x), scaled(x)
    assert cap_raw.take().tolist() == [[6.0, 10.0]] and cap_scaled.take().tolist() == [[1.0, 2.0]]


def test_behaviour_logprobs_sit_where_action_mask_scores_the_sampled_tokens():
    """--async_train: the engine's log-prob of response token j of row i lands where action_mask is 1
    for that token (column len(prompt) - 1 + j), the layout of every trainer log-prob."""
    from alignment.ppo.batch import behaviour_logprobs, rollout_to_batch
    from alignment.rollout.types import Rollout

    rollout = Rollout(
        prompt_ids=[[5, 6, 7], [8]],
        response_ids=[[9, 10], [11, 12, 2]],
        prompt_index=[0, 1],
        finished=[False, True],
        logprobs=[[-0.5, -1.5], [-0.1, -0.2, -0.3]],
    )
    batch = rollout_to_batch(rollout, pad_id=0)
    got = behaviour_logprobs(rollout, batch)
    assert got.shape == batch.action_mask.shape
    assert got[0].tolist() == [0.0, 0.0, -0.5, -1.5] and got[1].tolist() == pytest.approx([-0.1, -0.2, -0.3, 0.0])
    assert torch.equal(got != 0, batch.action_mask.bool())
    with pytest.raises(ValueError, match="not asked"):
        behaviour_logprobs(Rollout(prompt_ids=[[5]], response_ids=[[6]], prompt_index=[0], finished=[True]), batch)


def test_gspo_loss_is_the_clipped_sequence_ratio_by_hand():
    """GSPO (arXiv:2507.18071): s_i = exp(mean_t log(π/π_old)) over sequence i's response tokens; the loss is
    −mean over tokens of min(s_i A, clip(s_i) A), computed here with plain Python floats."""
    import math

    from alignment.losses.ppo import gspo_loss

    torch.manual_seed(0)
    logp, old = torch.randn(3, 5) * 0.3 - 1.0, torch.randn(3, 5) * 0.3 - 1.0
    adv = torch.tensor([[1.0] * 5, [-2.0] * 5, [0.5] * 5])
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.float32)
    loss, _ = gspo_loss(logp, old, adv, mask, 0.1, 0.15)
    total, count = 0.0, 0
    for i in range(3):
        n = int(mask[i].sum())
        s = math.exp(sum(float(logp[i, t] - old[i, t]) for t in range(n)) / n)
        a = float(adv[i, 0])
        per_token = -min(s * a, min(max(s, 0.9), 1.15) * a)
        total, count = total + per_token * n, count + n
    assert abs(loss.item() - total / count) < 1e-6
    # its gradient reaches every response token, through the sequence's mean log-ratio
    logp.requires_grad_(True)
    gspo_loss(logp, old, adv, mask, 10.0, 10.0)[0].backward()
    assert torch.all((logp.grad != 0) == mask.bool())


def test_overlong_penalty_is_dapos_linear_ramp():
    from alignment.losses.reward_shaping import overlong_penalty

    got = overlong_penalty(torch.tensor([10, 12, 14, 16, 20]), max_len=20, buffer=8, factor=0.5)
    assert got.tolist() == pytest.approx([0.0, 0.0, -0.125, -0.25, -0.5])


def test_is_correction_weights_are_the_truncated_ratio_by_hand():
    """--enable_vllm_is_correction (tis, one threshold C: LOW 0): w_t = min(exp(trainer log-prob − engine
    log-prob), C), 0 off the response, multiplying each token's clipped term."""
    import math

    from alignment.losses.ppo import is_weights

    trainer = torch.tensor([[-1.0, -2.0, -0.5, 0.0]])
    engine = torch.tensor([[-1.2, -1.0, -2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    w = is_weights(trainer, engine, mask, 0.0, 2.0, "tis")
    assert w.tolist()[0] == pytest.approx([math.exp(0.2), math.exp(-1.0), 2.0, 0.0])  # exp(1.5) > 2: truncated
    adv = torch.tensor([[1.0, -1.0, 0.5, 0.0]])
    weighted, _ = policy_loss(trainer, trainer, adv, mask, weight=w)  # ratio 1: each term is −A·w
    assert weighted.item() == pytest.approx(-(math.exp(0.2) * 1.0 - math.exp(-1.0) + 2.0 * 0.5) / 3)


def test_dynamic_filtering_keeps_groups_strictly_inside_the_range():
    from alignment.ppo.dynamic_sampling import kept_groups

    scores = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.5, 0.5])  # 5 groups of 2
    assert kept_groups(scores, 2, 0.0, 1.0) == [2, 4]
    assert kept_groups(scores, 2, -1.0, 1.0) == [1, 2, 3, 4]


def test_ema_update_is_the_decayed_average():
    from alignment.ppo.ema import EMA

    layer = torch.nn.Linear(2, 1)
    torch.nn.init.constant_(layer.weight, 1.0)
    ema = EMA(layer, beta=0.9)
    with torch.no_grad():
        layer.weight.fill_(3.0)
    ema.update(layer)
    assert ema.state_dict(layer)["weight"].flatten().tolist() == pytest.approx([0.9 * 1.0 + 0.1 * 3.0] * 2)


def test_staleness_is_a_distribution_over_samples():
    from alignment.ppo.staleness import staleness_metrics

    got = staleness_metrics([0, 1, 1, 3], 2)
    assert got == {
        "staleness/mean": 1.25,
        "staleness/max": 3.0,
        "staleness/lag_0": 0.25,
        "staleness/lag_1": 0.5,
        "staleness/lag_2": 0.0,
    }
    assert staleness_metrics([], 1) == {}
