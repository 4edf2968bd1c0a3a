import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_trainer.advantages import compute_advantages
from grpo_trainer.aggregation import BatchCounts, aggregate
from grpo_trainer.algorithm_settings import LOSS_AGGREGATIONS, AlgorithmSettings
from grpo_trainer.kl import kl_estimate
from grpo_trainer.logprobs import logprobs_and_entropy
from grpo_trainer.loss import grpo_loss

VOCAB, WIDTH = 13, 6


def _rollouts(seed, scores, group_size=4):
    """A small batch of rollouts: logits of a 'model', sampled tokens, masks, advantages."""
    gen = torch.Generator().manual_seed(seed)
    rows = len(scores)
    lengths = torch.randint(1, WIDTH + 1, (rows,), generator=gen)
    mask = (torch.arange(WIDTH) < lengths.unsqueeze(-1)).float()  # (B, T)
    logits = torch.randn(rows, WIDTH, VOCAB, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, VOCAB, (rows, WIDTH), generator=gen)
    groups = torch.arange(rows) // group_size
    advantages = compute_advantages(torch.tensor(scores, dtype=torch.float64), groups, mask)
    old = logprobs_and_entropy(logits + 0.1 * torch.randn(logits.shape, generator=gen), labels)[0]
    ref = logprobs_and_entropy(logits + 0.3 * torch.randn(logits.shape, generator=gen), labels)[0]
    return logits, labels, mask, advantages, old.detach(), ref.detach()


def _run(logits, labels, mask, advantages, old, ref, settings_, counts, parts):
    """Loss, gradient w.r.t. the logits and summed metrics over micro-batches ``parts``."""
    logits = logits.clone().requires_grad_()
    total, metrics = 0.0, {}
    for rows in parts:
        logprobs, entropy = logprobs_and_entropy(
            logits[rows], labels[rows], settings_.temperature, chunk_tokens=5
        )
        loss, step_metrics = grpo_loss(
            logprobs, old[rows], advantages[rows], mask[rows], counts, settings_, ref[rows], entropy
        )
        loss.backward()
        total = total + loss.detach()
        for key, value in step_metrics.items():
            metrics[key] = metrics.get(key, 0.0) + value
    return total, logits.grad, metrics


SCORES = [1.0, 0.0, 0.0, 1.0, 0.2, 0.9, 0.5, 0.5, 1.0, 1.0, 0.0, 1.0]


@pytest.mark.parametrize("mode", LOSS_AGGREGATIONS)
@pytest.mark.parametrize("kl_coef", [0.0, 0.05])
def test_micro_batches_and_shards_match_one_batch(mode, kl_coef):
    batch = _rollouts(0, SCORES)
    mask = batch[2]
    cfg = AlgorithmSettings(loss_aggregation=mode, kl_coef=kl_coef, temperature=0.7)
    counts = BatchCounts.of(mask, WIDTH)
    full = _run(*batch, cfg, counts, [slice(0, 12)])
    micro = _run(*batch, cfg, counts, [slice(0, 5), slice(5, 6), slice(6, 12)])
    shard_counts = BatchCounts.of(mask[:8], WIDTH) + BatchCounts.of(mask[8:], WIDTH)
    rank0 = _run(*batch, cfg, shard_counts, [slice(0, 4), slice(4, 8)])
    rank1 = _run(*batch, cfg, shard_counts, [slice(8, 12)])
    sharded = (rank0[0] + rank1[0], rank0[1] + rank1[1])
    for loss, grad in (micro[:2], sharded):
        torch.testing.assert_close(loss, full[0])
        torch.testing.assert_close(grad, full[1])
    for key, value in full[2].items():  # metrics are shares: they add up too
        torch.testing.assert_close(micro[2][key], value)
        torch.testing.assert_close(rank0[2][key] + rank1[2][key], value)
    assert ("kl" in full[2]) is (kl_coef > 0)
    assert full[1].abs().sum() > 0


@pytest.mark.parametrize("mode", LOSS_AGGREGATIONS)
def test_equal_rewards_without_kl_give_exactly_zero_gradient(mode):
    logits, labels, mask, advantages, old, ref = _rollouts(1, [0.3] * 8)
    assert (advantages == 0).all()
    cfg = AlgorithmSettings(loss_aggregation=mode, kl_coef=0.0)
    _, grad, metrics = _run(
        logits, labels, mask, advantages, old, ref, cfg, BatchCounts.of(mask, WIDTH), [slice(0, 8)]
    )
    assert (grad == 0).all()
    assert float(metrics["loss"]) == 0.0


@pytest.mark.parametrize("mode", LOSS_AGGREGATIONS)
def test_ratio_one_gives_minus_mean_advantage(mode):
    _, _, mask, advantages, old, _ = _rollouts(2, SCORES)
    counts = BatchCounts.of(mask, WIDTH)
    cfg = AlgorithmSettings(loss_aggregation=mode, kl_coef=0.0)
    loss, metrics = grpo_loss(old.clone(), old, advantages, mask, counts, cfg)
    torch.testing.assert_close(loss, aggregate(-advantages, mask, mode, counts))
    for key in ("clip_frac_high", "clip_frac_low", "dual_clip_frac", "approx_kl"):
        assert float(metrics[key]) == 0.0


def test_token_mean_with_ratio_one_is_minus_token_weighted_mean_advantage():
    _, _, mask, advantages, old, _ = _rollouts(2, SCORES)
    cfg = AlgorithmSettings(kl_coef=0.0)
    loss, _ = grpo_loss(old.clone(), old, advantages, mask, BatchCounts.of(mask, WIDTH), cfg)
    expected = -(advantages * mask).sum() / mask.sum()
    torch.testing.assert_close(loss, expected)


def test_kl_term_is_added_with_its_coefficient():
    _, _, mask, advantages, old, ref = _rollouts(3, SCORES)
    counts = BatchCounts.of(mask, WIDTH)
    logp = old + 0.05
    for estimator in ("k1", "k2", "k3"):
        cfg = AlgorithmSettings(kl_coef=0.1, kl_estimator=estimator)
        loss, metrics = grpo_loss(logp, old, advantages, mask, counts, cfg, ref_log_prob=ref)
        kl = aggregate(kl_estimate(logp, ref, estimator), mask, cfg.loss_aggregation, counts)
        torch.testing.assert_close(metrics["kl"], kl)
        torch.testing.assert_close(loss, metrics["pg_loss"] + 0.1 * kl)


def test_zero_kl_coefficient_never_touches_the_reference():
    _, _, mask, advantages, old, _ = _rollouts(4, SCORES)
    counts, cfg = BatchCounts.of(mask, WIDTH), AlgorithmSettings(kl_coef=0.0)
    without, _ = grpo_loss(old + 0.1, old, advantages, mask, counts, cfg)
    poisoned = torch.full_like(old, float("nan"))
    with_nan_ref, metrics = grpo_loss(old + 0.1, old, advantages, mask, counts, cfg, poisoned)
    torch.testing.assert_close(with_nan_ref, without)
    assert "kl" not in metrics
    with pytest.raises(ValueError, match="reference"):
        grpo_loss(old, old, advantages, mask, counts, AlgorithmSettings(kl_coef=0.1))


def test_metrics_report_clipping():
    mask = torch.ones(1, 4)
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[1.5, 0.5, 5.0, 1.0]]))
    adv = torch.tensor([[1.0, -1.0, -1.0, 1.0]])
    cfg = AlgorithmSettings(kl_coef=0.0)
    _, metrics = grpo_loss(logp, old, adv, mask, BatchCounts.of(mask, 4), cfg)
    assert float(metrics["clip_frac_high"]) == pytest.approx(0.25)
    assert float(metrics["clip_frac_low"]) == pytest.approx(0.25)
    assert float(metrics["dual_clip_frac"]) == pytest.approx(0.25)


def test_rejects_mismatched_shapes():
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="shape"):
        grpo_loss(x, x, x[:, :2], x, BatchCounts.of(x, 3), AlgorithmSettings(kl_coef=0.0))


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(0, WIDTH), min_size=1, max_size=8),
    st.sampled_from(LOSS_AGGREGATIONS),
    st.sampled_from(["k1", "k2", "k3"]),
    st.integers(0, 2**31 - 1),
)
def test_finite_loss_and_masked_rows_get_no_gradient(lengths, mode, estimator, seed):
    gen = torch.Generator().manual_seed(seed)
    rows = len(lengths)
    mask = (torch.arange(WIDTH) < torch.tensor(lengths).unsqueeze(-1)).float()
    logp = (torch.randn(rows, WIDTH, generator=gen) * 5 - 3).requires_grad_()
    old = torch.randn(rows, WIDTH, generator=gen) * 5 - 3
    ref = torch.randn(rows, WIDTH, generator=gen) * 5 - 3
    adv = torch.randn(rows, WIDTH, generator=gen) * 3 * mask
    cfg = AlgorithmSettings(loss_aggregation=mode, kl_coef=0.1, kl_estimator=estimator)
    loss, metrics = grpo_loss(logp, old, adv, mask, BatchCounts.of(mask, WIDTH), cfg, ref)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(v) for v in metrics.values())
    assert torch.isfinite(logp.grad).all()
    assert (logp.grad[mask == 0] == 0).all()
