"""The runtime parity guard: a step whose rollouts did not come from the learner's weights (here:
the engine kept stale weights because a sync was skipped) is not trained on."""

from __future__ import annotations

import pytest
import torch

from grpo_trainer.rewards.char_fraction import CharFractionReward
from grpo_trainer.sync_errors import WeightSyncMismatchError


@pytest.mark.parametrize(
    "ppo_epochs",
    [
        1,  # single-step plan: checked after the update's own forwards and backwards
        2,  # precomputed old logprobs: checked before the first mini-batch
    ],
)
def test_a_step_on_stale_engine_weights_is_refused_untrained(make_trainer, monkeypatch,
                                                             ppo_epochs):
    trainer = make_trainer(CharFractionReward(), maxSteps=2, promptsPerStep=4, groupSize=4,
                           learningRate=1e-2, ppoEpochs=ppo_epochs)
    assert trainer.config.max_logprob_mismatch == 1e-3  # the float32 default
    trainer.sync_weights()
    monkeypatch.setattr(trainer.weights, "sync", lambda: None)  # from now on the engine is stale

    first = trainer.train_step()  # rollouts of the synced weights: trained on
    assert first.optimizer_steps == ppo_epochs and first.logprob_mismatch < 1e-5
    before = trainer.learners.states()[0]

    with pytest.raises(WeightSyncMismatchError) as err:
        trainer.train_step()  # rollouts of step 0's weights, learner at step 1's
    after = trainer.learners.states()[0]
    assert all(torch.equal(before[name], after[name]) for name in before)
    assert trainer.step == 1
    failure = err.value
    assert failure.step == 2 and failure.limit == 1e-3 and failure.mismatch > 1e-3
    assert str(failure) == (
        f"step 2: mean |learner - engine| logprob {failure.mismatch:.4g} per token over the "
        "limit 0.001 (rollout.maxLogprobMismatch)"
    )
