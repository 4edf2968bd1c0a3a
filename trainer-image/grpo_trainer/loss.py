"""The GRPO loss of one micro-batch: what the learner calls.

    loss = aggregate(w * policy_loss) + klCoef * aggregate(kl_estimate(logp, ref_logp))
           - entropyCoef * aggregate(entropy)

w the rollout correction's importance weights (``rollout_correction``; 1 when it is off), all
terms aggregated with the same mode and the mini-batch's global ``BatchCounts``, so summing the
returned losses (and gradients) over micro-batches and data-parallel ranks gives the loss of the
whole mini-batch. The metrics follow the same rule: each value is this micro-batch's share, and
the mini-batch's metric is the SUM of the shares (detached 0-d tensors, so no device sync here).
"""

from __future__ import annotations

import torch
from torch import Tensor

from grpo_trainer.aggregation import BatchCounts, aggregate, masked_token_sum
from grpo_trainer.algorithm_settings import AlgorithmSettings
from grpo_trainer.kl import kl_estimate
from grpo_trainer.policy_loss import policy_loss
from grpo_trainer.rollout_correction import correction_weights, mismatch_k3


def _token_share(values: Tensor, response_mask: Tensor, counts: BatchCounts) -> Tensor:
    """This micro-batch's share of the mini-batch token mean of ``values`` (B, T)."""
    total = masked_token_sum(values.detach().to(torch.float32), response_mask).sum()
    return total / max(counts.num_tokens, 1.0)


def grpo_loss(
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    counts: BatchCounts,
    settings: AlgorithmSettings,
    ref_log_prob: Tensor | None = None,
    entropy: Tensor | None = None,
    engine_log_prob: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss and metrics of one micro-batch.

    Args:
        log_prob: (B, T) current-policy logprobs of the response tokens (with grad), computed at
            ``settings.temperature``.
        old_log_prob: (B, T) logprobs of the policy that generated the batch, same temperature.
        advantages: (B, T) token advantages (``grpo_trainer.advantages.compute_advantages``).
        response_mask: (B, T) 0/1 mask of the response tokens that count.
        counts: the mini-batch's global counts (all micro-batches, all ranks).
        settings: the algorithm settings.
        ref_log_prob: (B, T) reference-model logprobs; required when ``settings.kl_coef > 0``,
            ignored (never touched) when it is 0.
        entropy: (B, T) per-token entropy; required (with grad) when ``settings.entropy_coef``
            > 0, otherwise optional and reported as a metric only.
        engine_log_prob: (B, T) the engine's logprobs of the sampled tokens; required when
            the rollout correction is on.

    Returns:
        ``(loss, metrics)``: the scalar to backpropagate and detached 0-d tensors
        ``loss``, ``pg_loss``, ``clip_frac_high``, ``clip_frac_low``, ``dual_clip_frac``,
        ``approx_kl`` (old vs current policy, k1 token mean), plus ``kl`` (the aggregated KL
        estimate, before klCoef) when klCoef > 0, ``entropy`` when given, ``mismatch_kl``
        when the engine's logprobs are given, and ``is_weight_mean``, ``is_weight_sq_mean``,
        ``is_outside_fraction`` when the correction is on. Every metric is a share: sum them
        over micro-batches and ranks.
    """
    shapes = {t.shape for t in (log_prob, old_log_prob, advantages, response_mask)}
    if len(shapes) != 1 or log_prob.dim() != 2:
        raise ValueError(f"expected four (B, T) tensors of one shape, got {shapes}")
    mode = settings.loss_aggregation

    # Policy term: the clipped ratio objective of settings.policy_loss.
    terms = policy_loss(
        log_prob,
        old_log_prob,
        advantages,
        settings.clip_ratio_low,
        settings.clip_ratio_high,
        settings.clip_ratio_c,
        kind=settings.policy_loss,
        response_mask=response_mask,
    )
    token_loss = terms.loss
    correction = settings.rollout_correction
    metrics: dict[str, Tensor] = {}
    if engine_log_prob is not None:
        metrics["mismatch_kl"] = _token_share(mismatch_k3(old_log_prob, engine_log_prob),
                                              response_mask, counts)
    if correction.enabled:
        if engine_log_prob is None:
            raise ValueError("the rollout correction needs the engine's logprobs")
        weights, outside = correction_weights(old_log_prob, engine_log_prob, response_mask,
                                              correction)
        token_loss = token_loss * weights
        metrics["is_weight_mean"] = _token_share(weights, response_mask, counts)
        metrics["is_weight_sq_mean"] = _token_share(weights.square(), response_mask, counts)
        metrics["is_outside_fraction"] = _token_share(outside, response_mask, counts)
    pg_loss = aggregate(token_loss, response_mask, mode, counts)
    loss = pg_loss
    metrics |= {
        "pg_loss": pg_loss.detach(),
        "clip_frac_high": _token_share(terms.clipped_high, response_mask, counts),
        "clip_frac_low": _token_share(terms.clipped_low, response_mask, counts),
        "dual_clip_frac": _token_share(terms.dual_clipped, response_mask, counts),
        "approx_kl": _token_share(terms.approx_kl, response_mask, counts),
    }

    # KL term: with klCoef 0 the reference is never read.
    if settings.kl_coef > 0:
        if ref_log_prob is None:
            raise ValueError("klCoef > 0 needs the reference model's logprobs")
        if ref_log_prob.shape != log_prob.shape:
            raise ValueError(f"ref_log_prob {tuple(ref_log_prob.shape)} != {tuple(log_prob.shape)}")
        kl = aggregate(
            kl_estimate(log_prob, ref_log_prob, settings.kl_estimator), response_mask, mode, counts
        )
        loss = loss + settings.kl_coef * kl
        metrics["kl"] = kl.detach()

    # Entropy bonus: the policy's entropy aggregated like the policy loss (verl's).
    if settings.entropy_coef > 0:
        if entropy is None or not entropy.requires_grad:
            raise ValueError("entropyCoef > 0 needs the entropy with its gradient")
        loss = loss - settings.entropy_coef * aggregate(entropy, response_mask, mode, counts)
    if entropy is not None:
        metrics["entropy"] = _token_share(entropy, response_mask, counts)
    metrics["loss"] = loss.detach()
    return loss, metrics
