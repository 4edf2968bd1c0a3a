"""The clipped (PPO-style) policy-gradient loss with dual clip, per token.

As in verl's ``compute_policy_loss_vanilla``:

    ratio = exp(clamp(logp - old_logp, -20, 20))
    L     = max(-A * ratio, -A * clamp(ratio, 1 - clip_low, 1 + clip_high))
    L     = min(L, -A * clip_c)            only where A < 0 (dual clip)

The dual clip bounds the loss of a negative-advantage token whose ratio has run far above 1
(standard PPO clipping bounds nothing there: max() picks the unclipped term).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

_LOG_RATIO_BOUND = 20.0


class PolicyLossTerms(NamedTuple):
    """Per-token results, all (B, T) and unmasked; the caller aggregates with the mask."""

    loss: Tensor  # (B, T) the clipped policy-gradient loss
    clipped_high: Tensor  # (B, T) bool: A > 0 and ratio > 1 + clip_high (gradient cut)
    clipped_low: Tensor  # (B, T) bool: A < 0 and ratio < 1 - clip_low (gradient cut)
    dual_clipped: Tensor  # (B, T) bool: A < 0 and -A * ratio-term exceeded -A * clip_c
    approx_kl: Tensor  # (B, T) old_logp - logp (k1 estimate of KL(old || new)), detached


def policy_loss(
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_c: float = 3.0,
) -> PolicyLossTerms:
    """Per-token dual-clip PPO loss.

    Args:
        log_prob: (B, T) logprobs of the sampled tokens under the current policy (with grad).
        old_log_prob: (B, T) logprobs under the policy that generated the batch (constants).
        advantages: (B, T) token advantages (constants).
        clip_ratio_low: ratio lower clip is ``1 - clip_ratio_low``.
        clip_ratio_high: ratio upper clip is ``1 + clip_ratio_high``.
        clip_ratio_c: dual-clip bound (> 1) for tokens with negative advantage.

    Returns:
        ``PolicyLossTerms`` with the per-token loss and clipping indicators.
    """
    if not clip_ratio_c > 1:
        raise ValueError(f"clip_ratio_c must be > 1, got {clip_ratio_c}")
    advantages = advantages.detach()
    log_ratio = (log_prob - old_log_prob.detach()).clamp(-_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)
    ratio = torch.exp(log_ratio)  # (B, T)

    unclipped = -advantages * ratio  # (B, T)
    clipped = -advantages * ratio.clamp(1 - clip_ratio_low, 1 + clip_ratio_high)  # (B, T)
    ppo = torch.maximum(unclipped, clipped)  # (B, T)
    dual_bound = -advantages * clip_ratio_c  # (B, T)
    negative = advantages < 0  # (B, T)
    loss = torch.where(negative, torch.minimum(ppo, dual_bound), ppo)  # (B, T)

    with torch.no_grad():
        cut = clipped > unclipped  # the clipped term won: no gradient through the ratio
        clipped_high = cut & (advantages > 0)
        clipped_low = cut & negative
        dual_clipped = negative & (ppo > dual_bound)
    return PolicyLossTerms(
        loss=loss,
        clipped_high=clipped_high,
        clipped_low=clipped_low,
        dual_clipped=dual_clipped,
        approx_kl=-log_ratio.detach(),
    )
