"""The rollout correction and the entropy bonus against their peers' own code, transcribed here
from their sources: verl b178a3cd56f58b2d502255daba591e92833930a7
(verl/trainer/ppo/rollout_corr_helper.py: compute_rollout_correction_weights,
compute_is_metrics' effective sample size, compute_offpolicy_metrics' k3_kl;
verl/workers/actor/dp_actor.py: the entropy bonus) and TRL
f2cd57710ae345ea6428ae95363267fcf38a3dc8 (trl/trainer/grpo_trainer.py: the
vllm_importance_sampling_mode block). Shared random vectors with masked rows and ratios far
outside the bounds; then the identities: parity changes nothing, the weights carry no
gradient."""

from __future__ import annotations

import math

import pytest
import torch

from grpo_trainer.aggregation import BatchCounts, aggregate
from grpo_trainer.algorithm_settings import AlgorithmSettings
from grpo_trainer.logprobs import logprobs_and_entropy
from grpo_trainer.loss import grpo_loss
from grpo_trainer.policy_loss import policy_loss
from grpo_trainer.rollout_correction import (
    RolloutCorrection,
    correction_weights,
    effective_sample_size,
    mismatch_k3,
)

WIDTH = 9


def _vectors(seed: int = 0, b: int = 6, t: int = WIDTH, spread: float = 1.5):
    """old, engine logprobs (float64) whose token ratios reach e^±(3 spread), and a mask with
    uneven lengths and a row that counts nowhere."""
    g = torch.Generator().manual_seed(seed)
    engine = -torch.rand(b, t, generator=g, dtype=torch.float64) * 4
    old = engine + torch.randn(b, t, generator=g, dtype=torch.float64) * spread
    lengths = torch.tensor([9, 5, 1, 3, 9, 2])[:b]
    mask = (torch.arange(t) < lengths[:, None]).to(torch.float64)
    mask[2] = 0
    return old, engine, mask


def _masked_mean(values, mask):
    return (values * mask).sum() / mask.sum()


# --- the peers' code ------------------------------------------------------------------------

def verl_weights(log_ratio, response_mask, rollout_is, threshold):
    """compute_rollout_correction_weights (no batch normalisation)."""
    if rollout_is == "token":
        weights = torch.exp(torch.clamp(log_ratio, min=-20.0, max=20.0))
    else:
        log_ratio_sum = (log_ratio * response_mask).sum(-1).unsqueeze(-1)
        weights = torch.exp(torch.clamp(log_ratio_sum, min=-20.0, max=20.0)).expand_as(log_ratio)
    weights = weights * response_mask
    return weights.clamp(max=threshold).detach()


def verl_ess(untruncated_weights, response_mask, threshold):
    """compute_is_metrics' rollout_is_eff_sample_size (from the weights before truncation)."""
    w = untruncated_weights.clamp(min=1.0 / threshold, max=threshold)
    normalized = w / (_masked_mean(w, response_mask) + 1e-8)
    return 1.0 / _masked_mean(normalized.square(), response_mask).item()


def verl_k3_kl(old_log_prob, rollout_log_prob, response_mask):
    log_ratio = old_log_prob - rollout_log_prob
    return _masked_mean(torch.exp(log_ratio) - log_ratio - 1, response_mask).item()


def trl_weights(old, sampling, mask, mode, clip_min, clip_max):
    """The vllm_importance_sampling_mode block of GRPOTrainer._generate_and_score_completions."""
    per_token_logps_diff = (old - sampling) * mask
    if mode in ["sequence_mask", "sequence_truncate"]:
        logps_diff = per_token_logps_diff.sum(dim=-1, keepdim=True)
    else:
        logps_diff = per_token_logps_diff
    ratio = torch.exp(logps_diff)
    if mode in ["sequence_truncate", "token_truncate"]:
        ratio = torch.clamp(ratio, min=clip_min, max=clip_max)
    else:
        min_val = clip_min if clip_min is not None else -math.inf
        max_val = clip_max if clip_max is not None else math.inf
        ratio = ratio.masked_fill((ratio < min_val) | (ratio > max_val), value=0.0)
    return ratio


# --- agreement ------------------------------------------------------------------------------

@pytest.mark.parametrize("level", ["token", "sequence"])
def test_truncated_weights_are_verls(level):
    old, engine, mask = _vectors(spread=0.6 if level == "sequence" else 1.5)
    ours = correction_weights(old, engine, mask, RolloutCorrection(level=level, ratio_max=2.0))
    theirs = verl_weights(old - engine, mask, level, 2.0)
    torch.testing.assert_close(ours.weights.double(), theirs, rtol=1e-6, atol=1e-12)
    assert 0 < ours.outside.sum() < mask.sum()  # some truncated, some not
    assert not ours.outside[mask == 0].any()


@pytest.mark.parametrize("mode", ["token_truncate", "token_mask", "sequence_truncate",
                                  "sequence_mask"])
@pytest.mark.parametrize("ratio_min", [None, 0.5])
def test_every_mode_is_trls(mode, ratio_min):
    old, engine, mask = _vectors(seed=1, spread=0.6 if mode.startswith("sequence") else 1.5)
    level, how = mode.split("_")
    ours = correction_weights(old, engine, mask, RolloutCorrection(
        level=level, mode=how, ratio_max=3.0, ratio_min=ratio_min)).weights.double()
    theirs = trl_weights(old, engine, mask, mode, ratio_min, 3.0).expand_as(mask)
    # TRL leaves its ratio on padding and masks the loss later: compare where tokens count.
    torch.testing.assert_close(ours * mask, theirs * mask, rtol=1e-6, atol=1e-12)
    assert (ours[mask == 0] == 0).all()
    if how == "mask":
        assert ((ours == 0) & (mask == 1)).any()  # something was rejected


def test_extreme_ratios_stay_finite_and_bounded():
    old, engine, mask = _vectors(spread=15.0)  # ratios up to e^45, down to e^-45
    for level in ("token", "sequence"):
        for mode in ("truncate", "mask"):
            terms = correction_weights(old, engine, mask, RolloutCorrection(
                level=level, mode=mode, ratio_max=2.0, ratio_min=0.1))
            assert torch.isfinite(terms.weights).all()
            assert terms.weights.max() <= 2.0 and terms.weights.min() >= 0.0


def test_the_effective_sample_size_is_verls_when_no_ratio_is_below_the_bound():
    g = torch.Generator().manual_seed(3)
    engine = -torch.rand(6, WIDTH, generator=g, dtype=torch.float64) * 3
    old = engine + torch.empty(6, WIDTH, dtype=torch.float64).uniform_(
        math.log(0.6), math.log(4.0), generator=g)  # ratios in [0.6, 4]: some over 2
    _, _, mask = _vectors()
    counts = BatchCounts.of(mask, WIDTH)
    _, metrics = grpo_loss(old.clone().requires_grad_(), old, torch.ones_like(old), mask,
                           counts, _settings("token"), engine_log_prob=engine)
    ours = effective_sample_size(float(metrics["is_weight_mean"]),
                                 float(metrics["is_weight_sq_mean"]))
    untruncated = torch.exp(old - engine) * mask
    assert ours == pytest.approx(verl_ess(untruncated, mask, 2.0), rel=1e-6)
    assert float(metrics["mismatch_kl"]) == pytest.approx(verl_k3_kl(old, engine, mask),
                                                          rel=1e-6)
    assert float(metrics["is_outside_fraction"]) == pytest.approx(
        _masked_mean((untruncated > 2.0).double(), mask).item())


def _settings(level: str, mode: str = "truncate", **more) -> AlgorithmSettings:
    return AlgorithmSettings(kl_coef=0.0, rollout_correction=RolloutCorrection(
        level=level, mode=mode, ratio_max=2.0), **more)


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-sum-norm"])
def test_the_weights_multiply_each_tokens_policy_loss_as_verls_actor_does(aggregation):
    old, engine, mask = _vectors()
    g = torch.Generator().manual_seed(5)
    log_prob = (old + torch.randn(old.shape, generator=g, dtype=torch.float64) * 0.3)
    advantages = torch.randn(old.shape[0], 1, generator=g, dtype=torch.float64).expand_as(old)
    counts = BatchCounts.of(mask, WIDTH)
    settings = _settings("token", loss_aggregation=aggregation)

    ours_lp = log_prob.clone().requires_grad_()
    loss, metrics = grpo_loss(ours_lp, old, advantages, mask, counts, settings,
                              engine_log_prob=engine)
    loss.backward()

    ref_lp = log_prob.clone().requires_grad_()
    terms = policy_loss(ref_lp, old, advantages, 0.2, 0.2, 3.0)  # verl's vanilla loss
    weights = verl_weights(old - engine, mask, "token", 2.0)
    expected = aggregate(terms.loss * weights, mask, aggregation, counts)
    expected.backward()
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(ours_lp.grad, ref_lp.grad)
    assert float(metrics["is_weight_mean"]) == pytest.approx(_masked_mean(weights, mask).item())


@pytest.mark.parametrize("kind", ["ppo-clip", "gspo", "cispo"])
def test_at_parity_the_correction_changes_nothing(kind):
    old, _, mask = _vectors()
    log_prob = old + 0.1
    advantages = torch.linspace(-1, 1, old.shape[0], dtype=torch.float64)[:, None].expand_as(old)
    counts = BatchCounts.of(mask, WIDTH)
    aggregation = "seq-mean-token-mean" if kind == "gspo" else "token-mean"
    results = []
    for level in ("none", "token", "sequence"):
        lp = log_prob.clone().requires_grad_()
        loss, metrics = grpo_loss(lp, old, advantages, mask, counts, _settings(
            level, policy_loss=kind, loss_aggregation=aggregation), engine_log_prob=old)
        loss.backward()
        results.append((loss.detach(), lp.grad))
        if level != "none":
            assert float(metrics["is_weight_mean"]) == pytest.approx(1.0)
            assert float(metrics["is_outside_fraction"]) == 0.0
        assert float(metrics["mismatch_kl"]) == 0.0
    for loss, grad in results[1:]:
        torch.testing.assert_close(loss, results[0][0])
        torch.testing.assert_close(grad, results[0][1])


def test_the_correction_needs_the_engines_logprobs():
    old, _, mask = _vectors()
    with pytest.raises(ValueError, match="engine's logprobs"):
        grpo_loss(old.clone().requires_grad_(), old, torch.ones_like(old), mask,
                  BatchCounts.of(mask, WIDTH), _settings("token"))


def test_settings_come_from_the_spec_section():
    section = {"level": "sequence", "mode": "mask", "ratioMax": 3.0, "ratioMin": 0.2}
    assert AlgorithmSettings.from_algorithm({"rolloutCorrection": section}).rollout_correction \
        == RolloutCorrection("sequence", "mask", 3.0, 0.2)
    assert not AlgorithmSettings().rollout_correction.enabled  # verl's default: off
    with pytest.raises(ValueError, match="ratioMax"):
        RolloutCorrection(level="token", ratio_max=1.0)


# --- the entropy bonus ----------------------------------------------------------------------

def test_entropy_with_its_gradient_is_torchs_categorical_entropy():
    g = torch.Generator().manual_seed(7)
    logits = torch.randn(3, 5, 11, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 11, (3, 5), generator=g)
    ours = logits.clone().requires_grad_()
    logp, entropy = logprobs_and_entropy(ours, labels, temperature=0.7, chunk_tokens=4,
                                         entropy_grad=True)
    (logp.sum() + 2 * entropy.sum()).backward()

    theirs = logits.clone().requires_grad_()
    dist = torch.distributions.Categorical(logits=theirs / 0.7)
    (dist.log_prob(labels).sum() + 2 * dist.entropy().sum()).backward()
    torch.testing.assert_close(entropy, dist.entropy())
    torch.testing.assert_close(ours.grad, theirs.grad)
    # Without entropy_grad the entropy is a detached metric, same values.
    _, detached = logprobs_and_entropy(logits.clone().requires_grad_(), labels, 0.7, 4)
    assert not detached.requires_grad
    torch.testing.assert_close(detached, entropy.detach())


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean"])
def test_the_entropy_bonus_is_verls(aggregation):
    old, engine, mask = _vectors()
    entropy = torch.rand(old.shape, dtype=torch.float64).requires_grad_()
    counts = BatchCounts.of(mask, WIDTH)
    advantages = torch.ones_like(old)
    base, _ = grpo_loss(old.clone().requires_grad_(), old, advantages, mask, counts,
                        _settings("none", loss_aggregation=aggregation))
    loss, metrics = grpo_loss(old.clone().requires_grad_(), old, advantages, mask, counts,
                              _settings("none", loss_aggregation=aggregation, entropy_coef=0.01),
                              entropy=entropy)
    # dp_actor: policy_loss -= agg_loss(entropy, response_mask, loss_agg_mode) * entropy_coeff
    expected = base - 0.01 * aggregate(entropy, mask, aggregation, counts)
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert entropy.grad is not None and (entropy.grad[mask == 0] == 0).all()
    assert (entropy.grad[mask == 1] < 0).all()  # more entropy, less loss
    assert float(metrics["entropy"]) == pytest.approx(_masked_mean(entropy.detach(), mask).item())
    with pytest.raises(ValueError, match="gradient"):
        grpo_loss(old.clone().requires_grad_(), old, advantages, mask, counts,
                  _settings("none", entropy_coef=0.01), entropy=entropy.detach())


def test_mismatch_k3_is_zero_at_parity_and_positive_otherwise():
    old, engine, mask = _vectors()
    assert (mismatch_k3(old, old) == 0).all()
    k3 = mismatch_k3(old, engine)
    assert (k3 >= 0).all() and float(_masked_mean(k3, mask)) > 0
