import pytest

from grpo_trainer.algorithm_settings import CRD_KEYS, AlgorithmSettings
from grpo_trainer.rollout_correction import RolloutCorrection


def test_from_algorithm_maps_every_crd_key():
    spec = {
        "klCoef": 0.0,
        "klEstimator": "k2",
        "clipRatioLow": 0.1,
        "clipRatioHigh": 0.28,
        "clipRatioC": 5.0,
        "lossAggregation": "seq-mean-token-sum-norm",
        "normalizeAdvantageByStd": False,
        "temperature": 0.7,
        "advantageEstimator": "rloo",
        "advantageStdScope": "batch",
        "policyLoss": "cispo",
        "maskTruncatedCompletions": True,
        "overlongBufferTokens": 64,
        "overlongPenaltyFactor": 0.5,
        "maxResponseTokens": 256,
        "entropyCoef": 0.01,
        "rolloutCorrection": {"level": "sequence", "mode": "mask", "ratioMax": 3.0},
        "groupSize": 8,  # owned elsewhere: ignored
        "learningRate": None,
    }
    assert set(CRD_KEYS) <= set(spec)
    settings = AlgorithmSettings.from_algorithm(spec)
    assert settings == AlgorithmSettings(
        kl_coef=0.0,
        kl_estimator="k2",
        clip_ratio_low=0.1,
        clip_ratio_high=0.28,
        clip_ratio_c=5.0,
        loss_aggregation="seq-mean-token-sum-norm",
        normalize_advantage_by_std=False,
        temperature=0.7,
        advantage_estimator="rloo",
        advantage_std_scope="batch",
        policy_loss="cispo",
        mask_truncated_completions=True,
        overlong_buffer_tokens=64,
        overlong_penalty_factor=0.5,
        max_response_tokens=256,
        entropy_coef=0.01,
        rollout_correction=RolloutCorrection("sequence", "mask", 3.0),
    )


def test_absent_and_null_keys_take_defaults():
    assert AlgorithmSettings.from_algorithm({"klCoef": None}) == AlgorithmSettings()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("kl_coef", -0.1),
        ("kl_coef", float("nan")),
        ("kl_estimator", "low_var_kl"),
        ("clip_ratio_low", 1.0),
        ("clip_ratio_high", -0.1),
        ("clip_ratio_c", 1.0),
        ("loss_aggregation", "mean"),
        ("temperature", 0.0),
    ],
)
def test_rejects_out_of_range(field, value):
    with pytest.raises(ValueError):
        AlgorithmSettings(**{field: value})
