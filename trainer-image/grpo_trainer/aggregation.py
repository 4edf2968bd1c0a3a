"""Reducing a per-token loss matrix to the scalar that is backpropagated.

Every mode divides by counts of the WHOLE optimizer mini-batch (all micro-batches on all
data-parallel ranks), passed in as ``BatchCounts``, never by counts of the micro-batch at hand.
Each mode is then a sum of per-sequence terms over a constant, so the losses of the
micro-batches (and ranks) add up to the loss of the whole mini-batch, and so do their gradients:
accumulate micro-batch gradients by summing, and all-reduce them across ranks with SUM (with
DDP/FSDP, which average, multiply the loss by the world size).

With m the 0/1 response mask, n_b = sum_t m[b, t], N = BatchCounts.num_tokens,
S = BatchCounts.num_sequences and W = BatchCounts.response_width:

    token-mean               sum_{b,t} m*L / N
    seq-mean-token-sum       sum_b (sum_t m*L) / S
    seq-mean-token-mean      sum_b (sum_t m*L / n_b) / S
    seq-mean-token-sum-norm  sum_b (sum_t m*L) / S / W     (Dr.GRPO's constant normaliser)

S counts sequences with at least one response token, so fully masked rows (padding) change
neither numerator nor denominator. Masked positions are selected out with ``where``, so a
non-finite value there does not leak into the loss or its gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from grpo_trainer.algorithm_settings import LOSS_AGGREGATIONS


@dataclass(frozen=True)
class BatchCounts:
    """Normalisers of one optimizer step's mini-batch, summed over micro-batches and ranks.

    num_tokens: response tokens (sum of the mask).
    num_sequences: sequences with at least one response token.
    response_width: the constant width for ``seq-mean-token-sum-norm``: maxResponseTokens, not
        the padded width of some micro-batch (which would differ between micro-batches).
    """

    num_tokens: float
    num_sequences: float
    response_width: int

    def __post_init__(self) -> None:
        if self.num_tokens < 0 or self.num_sequences < 0:
            raise ValueError(f"counts must be >= 0, got {self}")
        if self.response_width < 1:
            raise ValueError(f"response_width must be >= 1, got {self.response_width}")

    @classmethod
    def of(cls, response_mask: Tensor, response_width: int) -> BatchCounts:
        """Counts of one (B, T) mask: a micro-batch's or one rank's share, to be added up."""
        mask = response_mask.bool()  # (B, T)
        return cls(
            num_tokens=float(mask.sum()),
            num_sequences=float(mask.any(dim=-1).sum()),
            response_width=response_width,
        )

    def __add__(self, other: BatchCounts) -> BatchCounts:
        if self.response_width != other.response_width:
            raise ValueError("cannot add counts with different response widths")
        return BatchCounts(
            self.num_tokens + other.num_tokens,
            self.num_sequences + other.num_sequences,
            self.response_width,
        )


def masked_token_sum(values: Tensor, response_mask: Tensor) -> Tensor:
    """(B, T) -> (B,) sum over each sequence's response tokens."""
    return torch.where(response_mask.bool(), values, 0.0).sum(dim=-1)


def aggregate(loss_mat: Tensor, response_mask: Tensor, mode: str, counts: BatchCounts) -> Tensor:
    """This micro-batch's share of the mini-batch loss under ``mode``.

    Args:
        loss_mat: (B, T) per-token loss.
        response_mask: (B, T) 0/1 (or bool) response mask.
        mode: one of ``LOSS_AGGREGATIONS``.
        counts: global counts of the mini-batch (see ``BatchCounts``).

    Returns:
        A scalar; summing it over all micro-batches and ranks gives the mini-batch loss.
    """
    if loss_mat.shape != response_mask.shape:
        raise ValueError(f"loss {tuple(loss_mat.shape)} and mask {tuple(response_mask.shape)}")
    seq_sums = masked_token_sum(loss_mat, response_mask)  # (B,)
    if mode == "token-mean":
        return seq_sums.sum() / max(counts.num_tokens, 1.0)
    num_sequences = max(counts.num_sequences, 1.0)
    if mode == "seq-mean-token-sum":
        return seq_sums.sum() / num_sequences
    if mode == "seq-mean-token-mean":
        seq_lengths = response_mask.bool().sum(dim=-1).clamp(min=1)  # (B,)
        return (seq_sums / seq_lengths).sum() / num_sequences
    if mode == "seq-mean-token-sum-norm":
        return seq_sums.sum() / num_sequences / counts.response_width
    raise ValueError(f"unknown loss aggregation {mode!r}; expected one of {LOSS_AGGREGATIONS}")
