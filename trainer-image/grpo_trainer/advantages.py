"""Group-relative advantages: a baseline from the other completions of the same prompt, then
an optional scaling.

Baseline (``estimator``), for a group g of n completions with mean ``mean_g``:

    grpo:  c_i = s_i - mean_g                       verl's compute_grpo_outcome_advantage
    rloo:  c_i = s_i - mean(s_j, j != i)            verl's compute_rloo_outcome_advantage
              = n / (n - 1) * (s_i - mean_g)
    reinforce++-baseline: c_i = s_i - mean_g, then (with normalize_by_std) whitened over every
           response token of the step, as verl's
           compute_reinforce_plus_plus_baseline_outcome_advantage: token-weighted mean and
           unbiased variance, (x - mean) / sqrt(var + 1e-8) (``compute_advantages``)

Scaling (``normalize_by_std``, over ``std_scope``):

    A_i = c_i / (std + epsilon)     normalize_by_std=True, std the unbiased (n - 1) standard
                                    deviation of the group's scores (std_scope "group", GRPO)
                                    or of all the step's scores ("batch", TRL's
                                    scale_rewards="batch")
    A_i = c_i                       normalize_by_std=False (Dr.GRPO)

A group whose scores are all equal (including a group of one completion) carries no relative
signal and gets exactly 0, never NaN and never float residue of ``s - mean``. verl instead gives
a group of one ``s / (1 + epsilon)`` (grpo) or ``s`` (rloo); with the group as the only
baseline, 0 is the consistent value (verl's vectorized RLOO gives 0 too).

The advantage is then broadcast over the completion's response tokens and masked.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
from torch import Tensor


def _group_index(group_ids: Tensor | Sequence[Hashable]) -> Tensor:
    """Dense group index in [0, G) for each of the N completions."""
    if isinstance(group_ids, Tensor):
        return torch.unique(group_ids, return_inverse=True)[1].reshape(-1)
    dense: dict[Hashable, int] = {}
    return torch.tensor([dense.setdefault(g, len(dense)) for g in group_ids], dtype=torch.long)


ESTIMATORS = ("grpo", "rloo", "reinforce++-baseline")
WHITEN_EPSILON = 1e-8  # verl's masked_whiten
STD_SCOPES = ("group", "batch")


def group_advantages(
    scores: Tensor,
    group_ids: Tensor | Sequence[Hashable],
    normalize_by_std: bool = True,
    epsilon: float = 1e-6,
    estimator: str = "grpo",
    std_scope: str = "group",
) -> Tensor:
    """One advantage per completion.

    Args:
        scores: (N,) finite scalar score of each completion.
        group_ids: (N,) prompt-group id of each completion: a tensor of ints or a sequence of
            hashables (e.g. prompt UUIDs). Groups may differ in size.
        normalize_by_std: divide by the unbiased std + epsilon.
        epsilon: added to the std.
        estimator: the baseline, one of ``ESTIMATORS`` (see the module docstring).
        std_scope: whose std scales, one of ``STD_SCOPES``.

    Returns:
        (N,) advantages, in ``scores``' dtype (float32 if ``scores`` is not floating).
    """
    if estimator not in ESTIMATORS or std_scope not in STD_SCOPES:
        raise ValueError(f"unknown estimator {estimator!r} or std scope {std_scope!r}")
    if scores.dim() != 1:
        raise ValueError(f"scores must be 1-D (N,), got shape {tuple(scores.shape)}")
    out_dtype = scores.dtype if scores.is_floating_point() else torch.float32
    s = scores.detach().to(torch.float64)  # (N,)
    if not bool(torch.isfinite(s).all()):
        raise ValueError("scores must be finite")
    index = _group_index(group_ids).to(s.device)  # (N,)
    if index.numel() != s.numel():
        raise ValueError(f"{s.numel()} scores but {index.numel()} group ids")
    if s.numel() == 0:
        return torch.zeros(0, dtype=out_dtype, device=scores.device)

    num_groups = int(index.max()) + 1
    zeros = torch.zeros(num_groups, dtype=s.dtype, device=s.device)  # (G,)
    counts = zeros.index_add(0, index, torch.ones_like(s))  # (G,)
    mean = zeros.index_add(0, index, s) / counts  # (G,)
    centered = s - mean[index]  # (N,)
    advantages = centered
    if estimator == "reinforce++-baseline":  # whitened over tokens by compute_advantages
        normalize_by_std = False
    if estimator == "rloo":  # n/(n-1) (s - mean): the mean of the others as the baseline
        n = counts[index]  # (N,)
        advantages = centered * n / (n - 1).clamp(min=1)
    if normalize_by_std and std_scope == "group":
        # Two-pass unbiased variance: accurate for scores of any offset.
        var = zeros.index_add(0, index, centered.square()) / (counts - 1).clamp(min=1)  # (G,)
        advantages = advantages / (var.sqrt()[index] + epsilon)  # (N,)
    elif normalize_by_std:
        advantages = advantages / (s.std(correction=1 if s.numel() > 1 else 0) + epsilon)

    # All-equal groups (a group of one included) give exactly 0.
    group_max = zeros.scatter_reduce(0, index, s, "amax", include_self=False)  # (G,)
    group_min = zeros.scatter_reduce(0, index, s, "amin", include_self=False)  # (G,)
    constant = (group_max == group_min)[index]  # (N,)
    advantages = torch.where(constant, 0.0, advantages)
    return advantages.to(out_dtype)


def compute_advantages(
    scores: Tensor,
    group_ids: Tensor | Sequence[Hashable],
    response_mask: Tensor,
    normalize_by_std: bool = True,
    epsilon: float = 1e-6,
    estimator: str = "grpo",
    std_scope: str = "group",
) -> Tensor:
    """Token-level advantages: ``group_advantages`` broadcast over each response and masked.

    Args:
        scores: (N,) scalar score per completion.
        group_ids: (N,) prompt-group id per completion.
        response_mask: (N, T) 1 on response tokens that count, 0 on padding.
        normalize_by_std, epsilon, estimator, std_scope: see ``group_advantages``.

    Returns:
        (N, T) advantages; exactly 0 where ``response_mask`` is 0.
    """
    if response_mask.dim() != 2 or response_mask.shape[0] != scores.shape[0]:
        raise ValueError(
            f"response_mask must be (N, T) with N={scores.shape[0]}, "
            f"got {tuple(response_mask.shape)}"
        )
    per_sequence = group_advantages(scores, group_ids, normalize_by_std, epsilon, estimator,
                                    std_scope)  # (N,)
    per_sequence = per_sequence.to(response_mask.device)
    mask = response_mask.bool()  # (N, T)
    tokens = torch.where(mask, per_sequence.unsqueeze(-1), 0.0)  # (N, T)
    if estimator == "reinforce++-baseline" and normalize_by_std:
        tokens = _whiten(tokens, mask)
    return tokens


def _whiten(values: Tensor, mask: Tensor) -> Tensor:
    """(values - mean) / sqrt(var + 1e-8) over the masked entries (unbiased var), 0 elsewhere."""
    picked = values[mask].to(torch.float64)
    if picked.numel() < 2:
        return torch.zeros_like(values)
    whitened = (values - picked.mean()) * torch.rsqrt(picked.var(correction=1) + WHITEN_EPSILON)
    return torch.where(mask, whitened.to(values.dtype), 0.0)
