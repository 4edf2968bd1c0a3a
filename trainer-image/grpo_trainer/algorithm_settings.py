"""The algorithm settings the loss math needs, one field per CRD ``spec.algorithm`` key.

The contract (``grpo_operator.api``) owns validation of the manifest; this dataclass re-checks the
same bounds so that the math never runs with settings it was not written for, and it maps the
camelCase CRD keys to Python names in one place (``CRD_KEYS``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grpo_trainer.rollout_correction import RolloutCorrection

KL_ESTIMATORS = ("k1", "k2", "k3")
ADVANTAGE_ESTIMATORS = ("grpo", "rloo", "reinforce++-baseline")
ADVANTAGE_STD_SCOPES = ("group", "batch")
POLICY_LOSSES = ("ppo-clip", "gspo", "cispo")
LOSS_AGGREGATIONS = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)

# CRD key (spec.algorithm) -> AlgorithmSettings field.
CRD_KEYS = {
    "klCoef": "kl_coef",
    "klEstimator": "kl_estimator",
    "clipRatioLow": "clip_ratio_low",
    "clipRatioHigh": "clip_ratio_high",
    "clipRatioC": "clip_ratio_c",
    "lossAggregation": "loss_aggregation",
    "normalizeAdvantageByStd": "normalize_advantage_by_std",
    "advantageEstimator": "advantage_estimator",
    "advantageStdScope": "advantage_std_scope",
    "policyLoss": "policy_loss",
    "maskTruncatedCompletions": "mask_truncated_completions",
    "overlongBufferTokens": "overlong_buffer_tokens",
    "overlongPenaltyFactor": "overlong_penalty_factor",
    "maxResponseTokens": "max_response_tokens",
    "temperature": "temperature",
    "entropyCoef": "entropy_coef",
}
ROLLOUT_CORRECTION_KEY = "rolloutCorrection"  # a section of its own (``RolloutCorrection``)


@dataclass(frozen=True)
class AlgorithmSettings:
    """GRPO loss settings; defaults follow verl's actor defaults.

    kl_coef: weight of the KL-to-reference term; 0 skips the reference model entirely.
    kl_estimator: "k1", "k2" or "k3" (see ``grpo_trainer.kl``).
    clip_ratio_low / clip_ratio_high: PPO clip range ``[1 - low, 1 + high]`` of the ratio.
    clip_ratio_c: dual-clip bound for negative advantages (> 1).
    loss_aggregation: one of ``LOSS_AGGREGATIONS`` (see ``grpo_trainer.aggregation``).
    normalize_advantage_by_std: divide the baselined scores by a std (GRPO) or not (Dr.GRPO).
    advantage_estimator: the baseline, one of ``ADVANTAGE_ESTIMATORS`` (``advantages``).
    advantage_std_scope: the group's std or the whole step's, ``ADVANTAGE_STD_SCOPES``.
    policy_loss: one of ``POLICY_LOSSES`` (``policy_loss``).
    mask_truncated_completions, overlong_buffer_tokens, overlong_penalty_factor: DAPO's length
        pieces (``batch``); max_response_tokens: the length they measure against.
    temperature: the sampling temperature; logits are divided by it wherever logprobs are taken.
    entropy_coef: weight of the entropy bonus subtracted from the loss (0: none).
    rollout_correction: importance weights between the engine and the learner
        (``rollout_correction``; off here as in verl, on in the CRD's default).
    """

    kl_coef: float = 0.001
    kl_estimator: str = "k3"
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0
    loss_aggregation: str = "token-mean"
    normalize_advantage_by_std: bool = True
    temperature: float = 1.0
    advantage_estimator: str = "grpo"
    advantage_std_scope: str = "group"
    policy_loss: str = "ppo-clip"
    mask_truncated_completions: bool = False
    overlong_buffer_tokens: int | None = None
    overlong_penalty_factor: float = 1.0
    max_response_tokens: int = 1024
    entropy_coef: float = 0.0
    rollout_correction: RolloutCorrection = RolloutCorrection()

    def __post_init__(self) -> None:
        if not self.kl_coef >= 0:
            raise ValueError(f"klCoef must be >= 0, got {self.kl_coef}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(
                f"klEstimator must be one of {KL_ESTIMATORS}, got {self.kl_estimator!r}"
            )
        if not 0 <= self.clip_ratio_low < 1:
            raise ValueError(f"clipRatioLow must be in [0, 1), got {self.clip_ratio_low}")
        if not self.clip_ratio_high >= 0:
            raise ValueError(f"clipRatioHigh must be >= 0, got {self.clip_ratio_high}")
        if not self.clip_ratio_c > 1:
            raise ValueError(f"clipRatioC must be > 1, got {self.clip_ratio_c}")
        if self.loss_aggregation not in LOSS_AGGREGATIONS:
            raise ValueError(
                f"lossAggregation must be one of {LOSS_AGGREGATIONS}, got {self.loss_aggregation!r}"
            )
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        for key, value, allowed in (
            ("advantageEstimator", self.advantage_estimator, ADVANTAGE_ESTIMATORS),
            ("advantageStdScope", self.advantage_std_scope, ADVANTAGE_STD_SCOPES),
            ("policyLoss", self.policy_loss, POLICY_LOSSES),
        ):
            if value not in allowed:
                raise ValueError(f"{key} must be one of {allowed}, got {value!r}")
        if self.policy_loss == "gspo" and self.loss_aggregation != "seq-mean-token-mean":
            raise ValueError("policyLoss gspo needs lossAggregation seq-mean-token-mean")
        if not self.entropy_coef >= 0:
            raise ValueError(f"entropyCoef must be >= 0, got {self.entropy_coef}")
        buffer = self.overlong_buffer_tokens
        if buffer is not None and not 0 < buffer <= self.max_response_tokens:
            raise ValueError(f"overlongBufferTokens must be in (0, maxResponseTokens], got "
                             f"{buffer}")

    @classmethod
    def from_algorithm(cls, algorithm: Mapping[str, Any]) -> AlgorithmSettings:
        """Build from a ``spec.algorithm`` mapping with camelCase keys.

        Keys this module does not own (groupSize, learningRate, ...) are ignored; absent or None
        keys take the defaults above.
        """
        kwargs = {
            field: algorithm[key]
            for key, field in CRD_KEYS.items()
            if algorithm.get(key) is not None
        }
        if algorithm.get(ROLLOUT_CORRECTION_KEY) is not None:
            kwargs["rollout_correction"] = RolloutCorrection.from_spec(
                algorithm[ROLLOUT_CORRECTION_KEY])
        return cls(**kwargs)
