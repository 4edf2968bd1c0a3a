import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_trainer.aggregation import BatchCounts, aggregate
from grpo_trainer.algorithm_settings import LOSS_AGGREGATIONS

LOSS = torch.tensor([[1.0, 2.0, 9.0], [4.0, 9.0, 9.0], [5.0, 5.0, 5.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # the last row is padding


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 7 / 3),
        ("seq-mean-token-sum", (3 + 4) / 2),
        ("seq-mean-token-mean", (1.5 + 4) / 2),
        ("seq-mean-token-sum-norm", (3 + 4) / 2 / 4),
    ],
)
def test_known_values(mode, expected):
    counts = BatchCounts.of(MASK, response_width=4)
    assert float(aggregate(LOSS, MASK, mode, counts)) == pytest.approx(expected)


def test_counts():
    counts = BatchCounts.of(MASK.bool(), response_width=4)
    assert (counts.num_tokens, counts.num_sequences) == (3, 2)
    total = counts + BatchCounts.of(torch.ones(2, 5), response_width=4)
    assert (total.num_tokens, total.num_sequences, total.response_width) == (13, 4, 4)
    with pytest.raises(ValueError, match="width"):
        counts + BatchCounts.of(MASK, response_width=5)
    with pytest.raises(ValueError):
        BatchCounts(1, 1, 0)


def test_empty_batch_is_zero_not_nan():
    mask = torch.zeros(2, 3)
    for mode in LOSS_AGGREGATIONS:
        assert float(aggregate(torch.ones(2, 3), mask, mode, BatchCounts.of(mask, 3))) == 0.0


def test_non_finite_values_at_masked_positions_do_not_leak():
    x = torch.tensor([[1.0, float("nan")], [2.0, float("inf")]], requires_grad=True)
    mask = torch.tensor([[1, 0], [1, 0]])
    for mode in LOSS_AGGREGATIONS:
        x.grad = None
        loss = aggregate(x * 3, mask, mode, BatchCounts.of(mask, 2))
        loss.backward()
        assert torch.isfinite(loss)
        assert torch.isfinite(x.grad).all()
        assert (x.grad[:, 1] == 0).all()


def test_unknown_mode_and_shape_mismatch():
    with pytest.raises(ValueError, match="token-mean"):
        aggregate(LOSS, MASK, "sum", BatchCounts.of(MASK, 3))
    with pytest.raises(ValueError):
        aggregate(LOSS[:, :2], MASK, "token-mean", BatchCounts.of(MASK, 3))


def _batch(seed, rows=10, width=7):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, width + 1, (rows,), generator=gen)
    lengths[0] = 0  # always one empty response
    mask = (torch.arange(width) < lengths.unsqueeze(-1)).to(torch.float64)  # (B, T) right-padded
    x = torch.randn(rows, width, generator=gen, dtype=torch.float64)
    weights = torch.randn(rows, width, generator=gen, dtype=torch.float64)
    return x, weights, mask


def _loss_and_grad(x, weights, mask, mode, counts, parts):
    """Sum of aggregate() over row ranges, each trimmed to its own padded width."""
    x = x.clone().requires_grad_()
    total = torch.zeros((), dtype=x.dtype)
    for rows in parts:
        width = max(int(mask[rows].sum(-1).max()), 1)  # micro-batches pad to different widths
        loss_mat = (x[rows, :width] * weights[rows, :width]).square() + x[rows, :width]
        total = total + aggregate(loss_mat, mask[rows, :width], mode, counts)
    total.backward()
    return total.detach(), x.grad


@pytest.mark.parametrize("mode", LOSS_AGGREGATIONS)
def test_micro_batches_and_data_parallel_shards_match_one_batch(mode):
    x, weights, mask = _batch(seed=1)
    width = mask.shape[1]
    counts = BatchCounts.of(mask, response_width=width)
    full = _loss_and_grad(x, weights, mask, mode, counts, [slice(0, 10)])
    micro = _loss_and_grad(x, weights, mask, mode, counts, [slice(0, 3), slice(3, 4), slice(4, 10)])
    # two ranks: each counts its shard, the counts are all-reduced (summed), the grads summed
    shards = [slice(0, 6), slice(6, 10)]
    global_counts = BatchCounts.of(mask[shards[0]], width) + BatchCounts.of(mask[shards[1]], width)
    assert global_counts == counts
    rank0 = _loss_and_grad(x, weights, mask, mode, global_counts, [slice(0, 2), slice(2, 6)])
    rank1 = _loss_and_grad(x, weights, mask, mode, global_counts, [slice(6, 10)])
    for loss, grad in (micro, (rank0[0] + rank1[0], rank0[1] + rank1[1])):
        torch.testing.assert_close(loss, full[0])
        torch.testing.assert_close(grad, full[1])
    assert full[1].abs().sum() > 0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 9), min_size=1, max_size=8),
    st.integers(0, 4),
    st.sampled_from(LOSS_AGGREGATIONS),
    st.integers(0, 2**31 - 1),
)
def test_finite_and_fully_masked_rows_contribute_nothing(lengths, padding_rows, mode, seed):
    width = max(lengths + [1])
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.arange(width) < torch.tensor(lengths).unsqueeze(-1)).float()  # (B, T)
    values = torch.randn(len(lengths), width, generator=gen) * 100
    counts = BatchCounts.of(mask, response_width=width)
    loss = aggregate(values, mask, mode, counts)
    assert torch.isfinite(loss)

    # padding rows full of garbage change nothing: not the loss, not the counts
    garbage = torch.full((padding_rows, width), float("nan"))
    padded_values = torch.cat([values, garbage]).requires_grad_()
    padded_mask = torch.cat([mask, torch.zeros(padding_rows, width)])
    assert BatchCounts.of(padded_mask, width) == counts
    padded_loss = aggregate(padded_values, padded_mask, mode, counts)
    padded_loss.backward()
    torch.testing.assert_close(padded_loss, loss)
    assert torch.isfinite(padded_values.grad).all()
    assert (padded_values.grad[len(lengths) :] == 0).all()
