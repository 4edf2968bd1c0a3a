import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_trainer.kl import kl_estimate

D = [-2.0, -0.5, 0.0, 0.25, 2.0]  # k3 stays below its clamp of 10 here


def _estimate(estimator, d):
    ref = torch.full((1, len(d)), -1.0, dtype=torch.float64)
    return kl_estimate(ref + torch.tensor([d], dtype=torch.float64), ref, estimator)[0].tolist()


def test_known_values():
    assert _estimate("k1", D) == pytest.approx(D)
    assert _estimate("k2", D) == pytest.approx([x * x / 2 for x in D])
    assert _estimate("k3", D) == pytest.approx([math.exp(-x) + x - 1 for x in D])


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_zero_when_policy_equals_reference(estimator):
    logp = torch.tensor([[-0.1, -4.0, -30.0]])
    assert (kl_estimate(logp, logp.clone(), estimator) == 0).all()


def test_k3_clamps_log_ratio_and_value():
    # d = -30: clamped to -20 before exp, then the value to 10; d = 30: exp(-20) + 19 -> 10
    values = _estimate("k3", [-30.0, 30.0, 12.0])
    assert values == pytest.approx([10.0, 10.0, 10.0])


def test_gradient_flows_to_policy_only():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0]], requires_grad=True)
    kl_estimate(logp, ref, "k3").sum().backward()
    d = torch.tensor([0.5, -1.0])
    torch.testing.assert_close(logp.grad[0], 1 - torch.exp(-d))  # d/dd (e^-d + d - 1)
    assert ref.grad is None


def test_unknown_estimator():
    x = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="k3"):
        kl_estimate(x, x, "low_var_kl")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-1e4, 1e4, allow_nan=False), min_size=1, max_size=20))
def test_k2_k3_non_negative_and_finite(d):
    for estimator in ("k2", "k3"):
        values = torch.tensor(_estimate(estimator, d))
        assert torch.isfinite(values).all()
        assert (values >= 0).all()
    assert all(0 <= v <= 10 for v in _estimate("k3", d))
