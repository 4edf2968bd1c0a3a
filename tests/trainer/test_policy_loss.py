import math

import pytest
import torch

from grpo_trainer.policy_loss import policy_loss


def _one_token(advantage: float, ratio: float, low=0.2, high=0.2, c=3.0):
    """Loss terms and d(loss)/d(logp) for a single token with the given advantage and ratio."""
    old = torch.tensor([[-1.0]], dtype=torch.float64)
    log_prob = (old + math.log(ratio)).requires_grad_()
    adv = torch.tensor([[advantage]], dtype=torch.float64)
    terms = policy_loss(log_prob, old, adv, low, high, c)
    terms.loss.sum().backward()
    return terms, float(terms.loss.detach()), float(log_prob.grad)


def test_ratio_one_gives_minus_advantage_and_no_clipping():
    adv = torch.tensor([[1.5, -0.5, 0.0]])
    logp = torch.tensor([[-0.3, -2.0, -7.0]])
    terms = policy_loss(logp, logp.clone(), adv, 0.2, 0.28, 3.0)
    torch.testing.assert_close(terms.loss, -adv)
    for flag in (terms.clipped_high, terms.clipped_low, terms.dual_clipped):
        assert not flag.any()
    assert (terms.approx_kl == 0).all()


@pytest.mark.parametrize(
    ("advantage", "ratio", "loss", "grad_is_zero", "flag"),
    [
        # A > 0: clipped above 1 + high, free below
        (2.0, 1.5, -2.0 * 1.2, True, "clipped_high"),
        (2.0, 0.5, -2.0 * 0.5, False, None),
        # A < 0: clipped below 1 - low, free above until the dual clip at c
        (-2.0, 0.5, 2.0 * 0.8, True, "clipped_low"),
        (-2.0, 2.0, 2.0 * 2.0, False, None),
        (-2.0, 5.0, 2.0 * 3.0, True, "dual_clipped"),
        # the dual clip never applies to A > 0
        (2.0, 5.0, -2.0 * 1.2, True, "clipped_high"),
    ],
)
def test_clipping_regions(advantage, ratio, loss, grad_is_zero, flag):
    terms, value, grad = _one_token(advantage, ratio)
    assert value == pytest.approx(loss)
    assert (grad == 0.0) is grad_is_zero
    if not grad_is_zero:  # d(-A r)/d logp = -A r
        assert grad == pytest.approx(-advantage * ratio)
    for name in ("clipped_high", "clipped_low", "dual_clipped"):
        assert bool(getattr(terms, name)) is (name == flag), name


def test_asymmetric_clip_range():
    _, value, _ = _one_token(1.0, 1.5, low=0.1, high=0.28)
    assert value == pytest.approx(-1.28)
    _, value, _ = _one_token(-1.0, 0.5, low=0.1, high=0.28)
    assert value == pytest.approx(0.9)


def test_dual_clip_bound_is_configurable():
    _, value, grad = _one_token(-1.0, 4.0, c=5.0)
    assert value == pytest.approx(4.0)
    assert grad != 0.0
    _, value, grad = _one_token(-1.0, 6.0, c=5.0)
    assert value == pytest.approx(5.0)
    assert grad == 0.0


def test_log_ratio_is_clamped_and_approx_kl_reported():
    old = torch.tensor([[0.0, 0.0, -1.0]])
    logp = torch.tensor([[50.0, -50.0, -1.5]])
    terms = policy_loss(logp, old, torch.tensor([[-1.0, 1.0, 1.0]]), 0.2, 0.2, 3.0)
    assert torch.isfinite(terms.loss).all()
    torch.testing.assert_close(terms.approx_kl, torch.tensor([[-20.0, 20.0, 0.5]]))


def test_old_logprobs_and_advantages_get_no_gradient():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old = torch.tensor([[-1.1, -1.9]], requires_grad=True)
    adv = torch.tensor([[1.0, -1.0]], requires_grad=True)
    policy_loss(logp, old, adv, 0.2, 0.2).loss.sum().backward()
    assert logp.grad is not None
    assert old.grad is None and adv.grad is None


def test_rejects_dual_clip_bound_not_above_one():
    x = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        policy_loss(x, x, x, 0.2, 0.2, 1.0)
