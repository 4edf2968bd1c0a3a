import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_trainer.advantages import compute_advantages, group_advantages


def test_known_values_with_std_normalisation():
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0])
    adv = group_advantages(scores, torch.tensor([7, 7, 7, 7]))
    # mean 0.5, unbiased std sqrt(1/3)
    expected = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    torch.testing.assert_close(adv, torch.tensor([expected, -expected, -expected, expected]))


def test_known_values_without_std_normalisation():
    scores = torch.tensor([1.0, 0.0, 0.0, 0.0, 3.0, 5.0])
    adv = group_advantages(scores, ["a", "a", "a", "a", "b", "b"], normalize_by_std=False)
    torch.testing.assert_close(adv, torch.tensor([0.75, -0.25, -0.25, -0.25, -1.0, 1.0]))


def test_matches_a_per_group_reference():
    gen = torch.Generator().manual_seed(0)
    scores = torch.rand(24, generator=gen, dtype=torch.float64)
    groups = torch.arange(24) % 5  # groups of 5 and 4, interleaved
    adv = group_advantages(scores, groups)
    for g in range(5):
        members = scores[groups == g]
        expected = (members - members.mean()) / (members.std() + 1e-6)
        torch.testing.assert_close(adv[groups == g], expected)


@pytest.mark.parametrize("normalize", [True, False])
def test_equal_scores_and_singletons_give_exactly_zero(normalize):
    # 0.1 * 3 / 3 != 0.1 in floating point: the zero must not depend on the mean's rounding.
    scores = torch.tensor([0.1, 0.1, 0.1, 0.7, 1.0, 0.0], dtype=torch.float64)
    groups = ["p", "p", "p", "single", "q", "q"]
    adv = group_advantages(scores, groups, normalize_by_std=normalize)
    assert adv[:4].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert adv[4] > 0 > adv[5]
    assert not torch.isnan(adv).any()


def test_broadcast_over_response_tokens_and_masked():
    scores = torch.tensor([1.0, 0.0])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    adv = compute_advantages(scores, [0, 0], mask, normalize_by_std=False)
    torch.testing.assert_close(adv, torch.tensor([[0.5, 0.5, 0.0], [-0.5, 0.0, 0.0]]))


def test_keeps_score_dtype_and_handles_integer_scores():
    assert group_advantages(torch.tensor([0.0, 1.0], dtype=torch.float64), [0, 0]).dtype == (
        torch.float64
    )
    adv = group_advantages(torch.tensor([0, 1]), [0, 0], normalize_by_std=False)
    assert adv.dtype == torch.float32
    assert adv.tolist() == [-0.5, 0.5]


def test_rejects_bad_input():
    with pytest.raises(ValueError, match="finite"):
        group_advantages(torch.tensor([float("nan"), 1.0]), [0, 0])
    with pytest.raises(ValueError, match="group ids"):
        group_advantages(torch.tensor([0.0, 1.0]), [0])
    with pytest.raises(ValueError, match=r"\(N, T\)"):
        compute_advantages(torch.tensor([0.0, 1.0]), [0, 0], torch.ones(3, 4))


@settings(max_examples=75, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.floats(-10, 10, allow_nan=False, width=32)),
        min_size=1,
        max_size=40,
    ),
    st.booleans(),
)
def test_groups_are_centred_and_scaled(rows, normalize):
    groups = torch.tensor([g for g, _ in rows])
    scores = torch.tensor([s for _, s in rows], dtype=torch.float64)
    adv = group_advantages(scores, groups, normalize_by_std=normalize)
    assert torch.isfinite(adv).all()
    for g in groups.unique():
        members, a = scores[groups == g], adv[groups == g]
        if members.numel() == 1 or bool((members == members[0]).all()):
            assert (a == 0).all()
            continue
        assert abs(float(a.mean())) < 1e-9
        if normalize and float(members.std()) > 1e-3:
            assert float(a.std()) == pytest.approx(1.0, rel=1e-3)
