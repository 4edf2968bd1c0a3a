"""Nucleus and top-k sampling through the real engine: the engine samples from a truncated
distribution, so its logprobs differ from the learner's by design; the rollout correction's
weights take that gap into the loss, and with exact parity they change nothing."""

from __future__ import annotations

import math

import pytest

from grpo_trainer.rewards.char_fraction import CharFractionReward

ONE_STEP = {"maxSteps": 1, "promptsPerStep": 8, "groupSize": 4, "learningRate": 1e-3}
OFF = {"level": "none"}


def _finite(*values: float) -> bool:
    return all(math.isfinite(v) for v in values)


def test_nucleus_sampling_is_corrected_by_importance_weights(make_trainer):
    reward = CharFractionReward()
    [off] = make_trainer(reward, topP=0.5, rolloutCorrection=OFF, **ONE_STEP).train()
    [on] = make_trainer(reward, topP=0.5, **ONE_STEP).train()  # the default: token, truncate

    for m in (off, on):
        # The engine's probabilities are renormalised over the nucleus: higher than the
        # learner's full softmax on every sampled token, and far from float32 parity.
        assert m.logprob_mismatch > 0.1 and m.mismatch_kl > 0.05, m
        assert _finite(m.loss, m.pg_loss, m.grad_norm) and m.skipped_steps == 0
    assert off.is_weight_mean is None  # no correction: the loss as before
    # With the correction, each token weighs the mass of the nucleus it was drawn from: at
    # least topP by the nucleus's definition, below 1.
    assert 0.5 <= on.is_weight_mean < 0.95, on.is_weight_mean
    assert 0 < on.is_effective_sample_size <= 1
    assert on.is_outside_fraction == 0.0  # r <= 1 never passes ratioMax
    figures = on.figures()
    assert figures.importance_weight_mean == pytest.approx(on.is_weight_mean)
    assert figures.mismatch_kl == pytest.approx(on.mismatch_kl)


def test_top_k_sampling_has_the_same_gap_and_masking_rejects_far_sequences(make_trainer):
    [m] = make_trainer(CharFractionReward(), topK=3, rolloutCorrection={
        "level": "sequence", "mode": "mask", "ratioMin": 0.5}, **ONE_STEP).train()
    assert m.logprob_mismatch > 0.1 and m.mismatch_kl > 0.05, m
    # A sequence's ratio is the product of its tokens' (each <= 1): long ones fall below 0.5
    # and are masked whole.
    assert 0 < m.is_outside_fraction <= 1 and m.is_weight_mean < 1
    assert _finite(m.loss, m.pg_loss)


def test_at_float32_parity_the_default_correction_weighs_every_token_one(make_trainer):
    [m] = make_trainer(CharFractionReward(), **ONE_STEP).train()
    assert m.logprob_mismatch < 1e-5
    assert m.is_weight_mean == pytest.approx(1.0, abs=1e-4)
    assert m.is_effective_sample_size == pytest.approx(1.0, abs=1e-6)
    assert m.is_outside_fraction == 0.0 and m.mismatch_kl < 1e-8
