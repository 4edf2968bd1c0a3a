"""Rollout correction: importance weights for the gap between the engine that sampled a step
and the learner's policy before the step (``spec.algorithm.rolloutCorrection``).

The engine's logprob e of a sampled token is that of the distribution it sampled from (after
temperature, topP and topK, in its dtype and kernels); the learner's old-policy logprob o is
that of the full distribution the loss assumes. With the response mask m:

    token:     log r[b, t] = o[b, t] - e[b, t]
    sequence:  log r[b, t] = sum_t' m[b, t'] (o[b, t'] - e[b, t'])     (on every token of b)
    r          = exp(clamp(log r, -20, 20))
    truncate:  w = clamp(r, ratioMin, ratioMax)
    mask:      w = r where ratioMin <= r <= ratioMax, else 0

and each token's policy loss is multiplied by w (a constant: no gradient flows through it)
before aggregation. This is verl's ``rollout_is`` (token or sequence, truncated above at
``rollout_is_threshold``; verl 0.x ``rollout_corr_helper``) and TRL's
``vllm_importance_sampling_mode`` (``token_truncate``, ``token_mask``, ``sequence_truncate``,
``sequence_mask``). The aggregation's denominators are left alone: a masked token counts as a
zero loss, as in TRL.

The figures (token means over the response tokens):

    mismatch_kl           mean(r_t - log r_t - 1) with the token ratio r_t: the k3 estimate of
                          KL(engine || learner) (verl's ``rollout_corr/k3_kl``), at any level
    is_weight_mean        mean(w)
    is_weight_sq_mean     mean(w^2); the effective sample size is mean(w)^2 / mean(w^2), in
                          [0, 1] (verl's ``rollout_is_eff_sample_size``, which clamps r to
                          [1/ratioMax, ratioMax] first: equal when no ratio falls outside)
    is_outside_fraction   tokens whose ratio fell outside [ratioMin, ratioMax] (truncated or
                          masked, as the mode says)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

LEVELS = ("token", "sequence", "none")
MODES = ("truncate", "mask")
_LOG_RATIO_BOUND = 20.0  # verl's SAFETY_BOUND


@dataclass(frozen=True)
class RolloutCorrection:
    """The correction's settings. Defaults: none (verl's; the CRD's default is ``token``)."""

    level: str = "none"
    mode: str = "truncate"
    ratio_max: float = 2.0
    ratio_min: float | None = None

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"rolloutCorrection.level must be one of {LEVELS}, got "
                             f"{self.level!r}")
        if self.mode not in MODES:
            raise ValueError(f"rolloutCorrection.mode must be one of {MODES}, got {self.mode!r}")
        if not self.ratio_max > 1:
            raise ValueError(f"rolloutCorrection.ratioMax must be > 1, got {self.ratio_max}")
        if self.ratio_min is not None and not 0 < self.ratio_min < 1:
            raise ValueError(f"rolloutCorrection.ratioMin must be in (0, 1), got "
                             f"{self.ratio_min}")

    @property
    def enabled(self) -> bool:
        return self.level != "none"

    @classmethod
    def from_spec(cls, section: Mapping[str, Any]) -> RolloutCorrection:
        """From a ``spec.algorithm.rolloutCorrection`` mapping (camelCase keys; absent or
        None keys take the defaults above)."""
        keys = {"level": "level", "mode": "mode", "ratioMax": "ratio_max",
                "ratioMin": "ratio_min"}
        return cls(**{field: section[key] for key, field in keys.items()
                      if section.get(key) is not None})


class CorrectionTerms(NamedTuple):
    """Per token, (B, T), 0/False on padding."""

    weights: Tensor  # the importance weight w (detached)
    outside: Tensor  # bool: the ratio fell outside [ratioMin, ratioMax]


def correction_weights(old_log_prob: Tensor, engine_log_prob: Tensor, response_mask: Tensor,
                       correction: RolloutCorrection) -> CorrectionTerms:
    """The weights of ``correction`` (enabled) for (B, T) old-policy and engine logprobs."""
    if not correction.enabled:
        raise ValueError("rollout correction is off (level none)")
    mask = response_mask.to(torch.float32)
    log_ratio = (old_log_prob.detach().float() - engine_log_prob.float()) * mask  # (B, T)
    if correction.level == "sequence":
        log_ratio = log_ratio.sum(-1, keepdim=True)  # (B, 1)
    ratio = torch.exp(log_ratio.clamp(-_LOG_RATIO_BOUND, _LOG_RATIO_BOUND))
    low = correction.ratio_min if correction.ratio_min is not None else 0.0
    outside = (ratio > correction.ratio_max) | (ratio < low)
    if correction.mode == "truncate":
        weights = ratio.clamp(min=low, max=correction.ratio_max)
    else:
        weights = torch.where(outside, 0.0, ratio)
    mask_bool = mask.bool()
    return CorrectionTerms(weights=weights.expand_as(mask) * mask,
                           outside=outside.expand_as(mask_bool) & mask_bool)


def mismatch_k3(old_log_prob: Tensor, engine_log_prob: Tensor) -> Tensor:
    """(B, T) per-token k3 estimate of KL(engine || learner): r - log r - 1, r = the token's
    ratio (unmasked: the caller averages over the response tokens)."""
    log_ratio = (old_log_prob.detach().float() - engine_log_prob.float()).clamp(
        -_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)
    return torch.exp(log_ratio) - log_ratio - 1.0


def effective_sample_size(weight_mean: float, weight_sq_mean: float) -> float:
    """mean(w)^2 / mean(w^2) (0 when every weight is 0)."""
    return weight_mean**2 / weight_sq_mean if weight_sq_mean > 0 else 0.0
