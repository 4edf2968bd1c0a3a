"""Per-token KL estimators between the policy and the frozen reference model.

With ``d = logp - ref_logp`` on tokens sampled from the policy (J. Schulman, "Approximating KL
divergence", 2020; verl ``kl_penalty``):

    k1 = d
    k2 = d**2 / 2
    k3 = clamp(exp(-d) + d - 1, -10, 10),  d clamped to [-20, 20] before the exp

k1 is unbiased but signed and noisy; k2 and k3 are non-negative, k3 unbiased in value (it is
verl's ``low_var_kl``, the GRPO paper's estimator). As in verl, only k3 clamps ``d``: k1 and k2
cannot overflow. The clamps make k3's gradient 0 outside the clamped range.
"""

from __future__ import annotations

import torch
from torch import Tensor

from grpo_trainer.algorithm_settings import KL_ESTIMATORS

_K3_LOG_RATIO_BOUND = 20.0
_K3_VALUE_BOUND = 10.0


def kl_estimate(log_prob: Tensor, ref_log_prob: Tensor, estimator: str) -> Tensor:
    """Per-token KL(policy || reference) estimate.

    Args:
        log_prob: (B, T) policy logprobs of the sampled tokens (gradient flows through these).
        ref_log_prob: (B, T) reference-model logprobs of the same tokens (treated as constants).
        estimator: "k1", "k2" or "k3".

    Returns:
        (B, T) per-token estimate, unmasked (the aggregation applies the response mask).
    """
    d = log_prob - ref_log_prob.detach()  # (B, T)
    if estimator == "k1":
        return d
    if estimator == "k2":
        return 0.5 * d.square()
    if estimator == "k3":
        d = d.clamp(-_K3_LOG_RATIO_BOUND, _K3_LOG_RATIO_BOUND)
        return (torch.exp(-d) + d - 1).clamp(-_K3_VALUE_BOUND, _K3_VALUE_BOUND)
    raise ValueError(f"unknown KL estimator {estimator!r}; expected one of {KL_ESTIMATORS}")
