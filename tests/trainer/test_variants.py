"""The GRPO variants against their peers' own code, transcribed here from their sources:
verl b178a3cd56f58b2d502255daba591e92833930a7 (verl/trainer/ppo/core_algos.py:
compute_rloo_outcome_advantage, compute_reinforce_plus_plus_baseline_outcome_advantage with
verl/utils/torch_functional.py masked_whiten, compute_policy_loss_gspo;
verl/workers/reward_manager/dapo.py: the overlong reward) and TRL
f2cd57710ae345ea6428ae95363267fcf38a3dc8 (trl/trainer/grpo_trainer.py: scale_rewards="batch",
loss_type="cispo"). Shared random vectors with masked rows, uneven groups and large ratios; then
the on-policy identities every loss must keep."""

from __future__ import annotations

import pytest
import torch

from grpo_trainer.advantages import compute_advantages, group_advantages
from grpo_trainer.algorithm_settings import AlgorithmSettings
from grpo_trainer.batch import Completion, build_batch, overlong_penalty
from grpo_trainer.policy_loss import policy_loss

LOSSES = ("ppo-clip", "gspo", "cispo")


def _vectors(seed: int = 0, b: int = 6, t: int = 7):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 4
    log_prob = old + torch.randn(b, t, generator=g, dtype=torch.float64) * 1.5  # ratios e^±4
    advantages = torch.randn(b, 1, generator=g, dtype=torch.float64).expand(b, t).clone()
    lengths = torch.tensor([7, 5, 1, 3, 7, 2])
    mask = (torch.arange(t) < lengths[:, None]).to(torch.float64)
    mask[2] = 0  # a row that counts nowhere
    return log_prob.requires_grad_(), old, advantages, mask


# --- the peers' code ------------------------------------------------------------------------

def verl_group_means(scores: torch.Tensor, index: list) -> tuple[dict, dict]:
    """verl's id2score and id2mean (a lone completion's mean is 0), as both estimators build
    them."""
    id2score: dict = {}
    for i, idx in enumerate(index):
        id2score.setdefault(idx, []).append(scores[i])
    id2mean = {idx: torch.mean(torch.stack(v)) if len(v) > 1 else torch.tensor(0.0)
               for idx, v in id2score.items()}
    return id2score, id2mean


def verl_rloo(scores: torch.Tensor, index: list) -> torch.Tensor:
    id2score, id2mean = verl_group_means(scores, index)
    scores = scores.clone()
    for i in range(len(scores)):
        response_num = len(id2score[index[i]])
        if response_num > 1:
            scores[i] = (scores[i] * response_num / (response_num - 1)
                         - id2mean[index[i]] * response_num / (response_num - 1))
    return scores


def verl_reinforce_pp_baseline(scores, response_mask, index):
    _, id2mean = verl_group_means(scores, index)
    scores = scores.clone()
    for i in range(len(scores)):
        scores[i] = scores[i] - id2mean[index[i]]
    scores = scores.unsqueeze(-1).tile([1, response_mask.shape[-1]]) * response_mask
    return verl_masked_whiten(scores, response_mask) * response_mask


def verl_masked_whiten(values, mask):
    def masked_mean(v, m):
        return (v * m).sum() / (m.sum() + 1e-8)
    mean = masked_mean(values, mask)
    centered = values - mean
    variance = masked_mean(centered**2, mask)
    mask_sum = mask.sum()
    variance = variance * (mask_sum / (mask_sum - 1))
    return (values - mean) * torch.rsqrt(variance + 1e-8)


def verl_overlong_reward(valid_response_length, max_resp_len, overlong_buffer_len,
                         overlong_penalty_factor):
    expected_len = max_resp_len - overlong_buffer_len
    exceed_len = valid_response_length - expected_len
    return min(-exceed_len / overlong_buffer_len * overlong_penalty_factor, 0)


def trl_batch_scaled(rewards: torch.Tensor, index: list) -> torch.Tensor:
    groups = {g: rewards[[i for i, x in enumerate(index) if x == g]] for g in set(index)}
    mean = torch.stack([groups[g].mean() for g in index])
    std = rewards.std()  # nanstd: Bessel's correction over the whole (gathered) batch
    return (rewards - mean) / (std + 1e-4)


def verl_gspo(old_log_prob, log_prob, advantages, response_mask, clip_ratio_low,
              clip_ratio_high):
    negative_approx_kl = log_prob - old_log_prob
    seq_lengths = torch.sum(response_mask, dim=-1).clamp(min=1)
    negative_approx_kl_seq = torch.sum(negative_approx_kl * response_mask, dim=-1) / seq_lengths
    log_seq_importance_ratio = (log_prob - log_prob.detach()
                                + negative_approx_kl_seq.detach().unsqueeze(-1))
    log_seq_importance_ratio = torch.clamp(log_seq_importance_ratio, max=10.0)
    seq_importance_ratio = torch.exp(log_seq_importance_ratio)
    pg_losses1 = -advantages * seq_importance_ratio
    pg_losses2 = -advantages * torch.clamp(seq_importance_ratio, 1 - clip_ratio_low,
                                           1 + clip_ratio_high)
    return torch.maximum(pg_losses1, pg_losses2)


def trl_cispo(per_token_logps, old_per_token_logps, advantages, epsilon_high):
    coef_1 = torch.exp(per_token_logps - old_per_token_logps)
    clamped_ratios = torch.clamp(coef_1, max=epsilon_high).detach()
    return -clamped_ratios * advantages * per_token_logps


# --- agreement ------------------------------------------------------------------------------

SCORES = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.25, 1.0, 0.0, 0.75, 0.75], dtype=torch.float64)
GROUPS = ["a", "a", "a", "a", "b", "b", "c", "c", "c", "d"]  # uneven; "d" has one


def test_rloo_is_verls_and_a_lone_completion_gets_zero():
    ours = group_advantages(SCORES, GROUPS, normalize_by_std=False, estimator="rloo")
    verl = verl_rloo(SCORES, GROUPS)
    torch.testing.assert_close(ours[:9], verl[:9])
    assert ours[9] == 0  # verl's loop keeps the raw score; its vectorized form gives 0 too
    others = torch.tensor([SCORES[[j for j in range(4) if j != i]].mean() for i in range(4)])
    torch.testing.assert_close(ours[:4], SCORES[:4] - others.to(torch.float64))


def test_reinforce_pp_baseline_is_verls_over_the_steps_tokens():
    lengths = torch.tensor([7, 5, 1, 3, 7, 2, 4, 6, 7])
    mask = (torch.arange(7) < lengths[:, None]).to(torch.float64)
    ours = compute_advantages(SCORES[:9], GROUPS[:9], mask, estimator="reinforce++-baseline")
    torch.testing.assert_close(ours, verl_reinforce_pp_baseline(SCORES[:9], mask, GROUPS[:9]))
    tokens = ours[mask.bool()]
    assert abs(float(tokens.mean())) < 1e-6 and abs(float(tokens.std()) - 1) < 1e-6


def test_the_overlong_punishment_is_verls_dapo_reward():
    lengths = torch.tensor([0.0, 100.0, 192.0, 200.0, 230.0, 256.0])
    ours = overlong_penalty(lengths, max_tokens=256, buffer=64, factor=0.5)
    theirs = [verl_overlong_reward(n, 256, 64, 0.5) for n in lengths.tolist()]
    torch.testing.assert_close(ours, torch.tensor(theirs, dtype=torch.float32))
    assert ours[:3].eq(0).all() and ours[-1] == -0.5


def test_length_pieces_shape_advantages_not_the_reported_scores():
    def completion(n: int, reason: str) -> Completion:
        return Completion(tuple(range(1, n + 1)), (-1.0,) * n, "x" * n, reason)

    groups = [[completion(2, "stop"), completion(8, "length"), completion(3, "stop"),
               completion(6, "stop")]]
    settings = AlgorithmSettings(mask_truncated_completions=True, overlong_buffer_tokens=4,
                                 max_response_tokens=8, normalize_advantage_by_std=False)
    batch = build_batch([[9]], groups, [1.0, 1.0, 1.0, 1.0], 0, settings)
    assert batch["scores"].tolist() == [1.0, 1.0, 1.0, 1.0]  # the verifier's, as reported
    assert batch["response_mask"][1].sum() == 0  # truncated: out of the loss
    assert batch["response_mask"][3].sum() == 6
    # lengths 2, 8, 3, 6 -> penalties 0, -1, 0, -0.5; group mean -0.375
    assert batch["advantages"][0, 0] == pytest.approx(0.375)
    assert batch["advantages"][3, 0] == pytest.approx(-0.125)
    assert (batch["advantages"][1] == 0).all()  # masked


def test_batch_std_scaling_is_trls():
    ours = group_advantages(SCORES[:9], GROUPS[:9], epsilon=1e-4, std_scope="batch")
    torch.testing.assert_close(ours, trl_batch_scaled(SCORES[:9], GROUPS[:9]))


def test_gspo_is_verls_in_value_and_gradient():
    log_prob, old, adv, mask = _vectors()
    ours = policy_loss(log_prob, old, adv, 3e-4, 4e-4, kind="gspo", response_mask=mask).loss
    theirs = verl_gspo(old, log_prob, adv, mask, 3e-4, 4e-4)
    torch.testing.assert_close(ours * mask, theirs * mask)
    (g_ours,) = torch.autograd.grad((ours * mask).sum(), log_prob)
    (g_theirs,) = torch.autograd.grad((theirs * mask).sum(), log_prob)
    torch.testing.assert_close(g_ours, g_theirs)


def test_cispo_is_trls_in_value_and_gradient():
    log_prob, old, adv, mask = _vectors(1)
    ours = policy_loss(log_prob, old, adv, 0.2, 4.0, kind="cispo").loss
    theirs = trl_cispo(log_prob, old, adv, epsilon_high=5.0)
    torch.testing.assert_close(ours * mask, theirs * mask)
    (g_ours,) = torch.autograd.grad((ours * mask).sum(), log_prob)
    (g_theirs,) = torch.autograd.grad((theirs * mask).sum(), log_prob)
    torch.testing.assert_close(g_ours, g_theirs)
    assert (g_ours.abs() > 0)[mask.bool() & (adv != 0)].all()  # no token loses its gradient


# --- on-policy identities -------------------------------------------------------------------

@pytest.mark.parametrize("kind", LOSSES)
def test_on_policy_nothing_is_clipped_and_the_gradient_is_minus_a_grad_logp(kind):
    log_prob, _, adv, mask = _vectors(2)
    terms = policy_loss(log_prob, log_prob.detach(), adv, 0.2, 0.2, kind=kind,
                        response_mask=mask)
    for flag in (terms.clipped_high, terms.clipped_low, terms.dual_clipped):
        assert not flag.any()
    (grad,) = torch.autograd.grad((terms.loss * mask).sum(), log_prob)
    torch.testing.assert_close(grad, -adv * mask)


@pytest.mark.parametrize("kind", LOSSES)
def test_zero_advantages_give_a_zero_gradient(kind):
    log_prob, old, _, mask = _vectors(3)
    terms = policy_loss(log_prob, old, torch.zeros_like(old), 0.2, 0.2, kind=kind,
                        response_mask=mask)
    (grad,) = torch.autograd.grad((terms.loss * mask).sum(), log_prob)
    assert (grad == 0).all()


def test_gspo_clips_a_whole_sequence_by_its_mean_ratio():
    old = torch.zeros(1, 3, dtype=torch.float64)
    log_prob = torch.tensor([[0.3, -0.1, 0.1]], dtype=torch.float64, requires_grad=True)
    mask = torch.ones_like(old)
    up = policy_loss(log_prob, old, torch.ones_like(old), 0.05, 0.05, kind="gspo",
                     response_mask=mask)
    assert up.clipped_high.all()  # exp(mean 0.1) = 1.105 > 1.05 for every token
    (grad,) = torch.autograd.grad(up.loss.sum(), log_prob)
    assert (grad == 0).all()
    with pytest.raises(ValueError, match="mask"):
        policy_loss(log_prob, old, torch.ones_like(old), 0.2, 0.2, kind="gspo")
