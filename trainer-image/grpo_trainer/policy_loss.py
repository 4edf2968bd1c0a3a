"""Policy-gradient losses, per token (the caller aggregates them with the mask).

``ppo-clip``, as verl's ``compute_policy_loss_vanilla``:

    ratio = exp(clamp(logp - old_logp, -20, 20))
    L     = max(-A * ratio, -A * clamp(ratio, 1 - clip_low, 1 + clip_high))
    L     = min(L, -A * clip_c)            only where A < 0 (dual clip)

The dual clip bounds the loss of a negative-advantage token whose ratio has run far above 1
(standard PPO clipping bounds nothing there: max() picks the unclipped term).

``gspo`` (Zheng et al. 2025), as verl's ``compute_policy_loss_gspo``: one importance ratio per
sequence, the geometric mean of its token ratios, carried to every token so that each token's
gradient is its own log-probability's:

    log s_b   = sum_t m (logp - old_logp) / max(sum_t m, 1)
    s[b,t]    = exp(min(sg[log s_b] + logp - sg[logp], 10))
    L         = max(-A * s, -A * clamp(s, 1 - clip_low, 1 + clip_high))

``cispo`` (MiniMax-M1), as TRL's ``loss_type="cispo"``: the importance weight is truncated
above and detached, and multiplies the log-probability (REINFORCE with a clipped weight), so
no token loses its gradient to clipping:

    ratio = exp(clamp(logp - old_logp, -20, 20))
    L     = -sg[min(ratio, 1 + clip_high)] * A * logp

(TRL's epsilon_high is this cap, 1 + clip_high; verl also clamps below, at 1 - clip_low.)
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

_LOG_RATIO_BOUND = 20.0
_GSPO_LOG_RATIO_MAX = 10.0  # verl's


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
    kind: str = "ppo-clip",
    response_mask: Tensor | None = None,
) -> PolicyLossTerms:
    """Per-token policy loss of ``kind`` (see the module docstring).

    Args:
        log_prob: (B, T) logprobs of the sampled tokens under the current policy (with grad).
        old_log_prob: (B, T) logprobs under the policy that generated the batch (constants).
        advantages: (B, T) token advantages (constants).
        clip_ratio_low: ratio lower clip is ``1 - clip_ratio_low``.
        clip_ratio_high: ratio upper clip is ``1 + clip_ratio_high``.
        clip_ratio_c: dual-clip bound (> 1) for tokens with negative advantage (ppo-clip).
        kind: ``ppo-clip``, ``gspo`` or ``cispo``.
        response_mask: (B, T) 0/1, which tokens make a sequence's ratio (gspo needs it).

    Returns:
        ``PolicyLossTerms`` with the per-token loss and clipping indicators.
    """
    if not clip_ratio_c > 1:
        raise ValueError(f"clip_ratio_c must be > 1, got {clip_ratio_c}")
    advantages = advantages.detach()
    log_ratio = (log_prob - old_log_prob.detach()).clamp(-_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)
    if kind == "gspo":
        if response_mask is None:
            raise ValueError("gspo needs the response mask")
        return _gspo(log_prob, log_ratio, advantages, response_mask, clip_ratio_low,
                     clip_ratio_high)
    if kind == "cispo":
        return _cispo(log_prob, log_ratio, advantages, clip_ratio_high)
    if kind != "ppo-clip":
        raise ValueError(f"unknown policy loss {kind!r}")
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


def _gspo(log_prob: Tensor, log_ratio: Tensor, advantages: Tensor, mask: Tensor,
          clip_ratio_low: float, clip_ratio_high: float) -> PolicyLossTerms:
    m = mask.to(log_ratio.dtype)
    sequence = (log_ratio * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1)
    log_s = (sequence.detach() + log_prob - log_prob.detach()).clamp(max=_GSPO_LOG_RATIO_MAX)
    s = torch.exp(log_s)  # (B, T): the sequence's ratio, each token's gradient
    unclipped = -advantages * s
    clipped = -advantages * s.clamp(1 - clip_ratio_low, 1 + clip_ratio_high)
    loss = torch.maximum(unclipped, clipped)
    with torch.no_grad():
        cut = clipped > unclipped
    return PolicyLossTerms(loss=loss, clipped_high=cut & (advantages > 0),
                           clipped_low=cut & (advantages < 0),
                           dual_clipped=torch.zeros_like(cut), approx_kl=-log_ratio.detach())


def _cispo(log_prob: Tensor, log_ratio: Tensor, advantages: Tensor,
           clip_ratio_high: float) -> PolicyLossTerms:
    ratio = torch.exp(log_ratio.detach())
    cap = 1 + clip_ratio_high
    loss = -ratio.clamp(max=cap) * advantages * log_prob
    capped = ratio > cap
    return PolicyLossTerms(loss=loss, clipped_high=capped, clipped_low=torch.zeros_like(capped),
                           dual_clipped=torch.zeros_like(capped), approx_kl=-log_ratio.detach())
