"""Learner ranks: data parallelism is exact, every parameter learns, a zero signal changes
nothing."""

from __future__ import annotations

import os

import pytest
import torch

from grpo_trainer.algorithm_settings import AlgorithmSettings
from grpo_trainer.learner.update import UpdatePlan

from .conftest import generated_batch, max_diff

SETTINGS = AlgorithmSettings(kl_coef=0.01)


def test_two_gloo_ranks_match_one_rank(make_learners, batch):
    # Two mini-batches of 16 (two optimizer steps), micro-batches of 4 per rank.
    one = make_learners(1, SETTINGS)
    two = make_learners(2, SETTINGS)
    initial = one.states()[0]
    m1 = one.update(batch, UpdatePlan(1, 16, 4, 1.0, 12), mini_batch_size=16)
    m2 = two.update(batch, UpdatePlan(1, 8, 4, 1.0, 12), mini_batch_size=16)
    [after_one] = one.states()
    rank0, rank1 = two.states()

    assert m1["optimizer_steps"] == m2["optimizer_steps"] == 2
    assert max_diff(rank0, rank1) == 0.0  # replicas stay identical
    assert max_diff(after_one, rank0) < 1e-5
    assert max_diff(after_one, initial) > 1e-4  # and something was learnt
    for key in ("loss", "pg_loss", "kl", "grad_norm", "entropy"):
        assert m1[key] == pytest.approx(m2[key], rel=1e-4, abs=1e-6), key


def test_every_parameter_changes_with_nonzero_advantages(make_learners, batch):
    learners = make_learners(1)
    before = learners.states()[0]
    metrics = learners.update(batch, UpdatePlan(1, 32, 8, 1.0, 12), mini_batch_size=32)
    after = learners.states()[0]
    assert metrics["optimizer_steps"] == 1
    unchanged = [name for name in before if torch.equal(before[name], after[name])]
    assert unchanged == []


def test_nothing_changes_with_equal_rewards_no_kl_no_weight_decay(make_learners, engines, prompts):
    batch = generated_batch(engines, prompts, scores=[0.5] * 32)
    assert torch.count_nonzero(batch["advantages"]) == 0
    learners = make_learners(1, AlgorithmSettings(kl_coef=0.0), weight_decay=0.0)
    before = learners.states()[0]
    metrics = learners.update(batch, UpdatePlan(2, 16, 8, 1.0, 12), mini_batch_size=16)
    after = learners.states()[0]
    assert metrics["grad_norm"] == 0.0
    assert all(torch.equal(before[name], after[name]) for name in before)


def _torch_threads(_actor) -> int:
    return torch.get_num_threads()


def test_cpu_ranks_share_the_cores_instead_of_rays_one_thread(make_learners):
    """Here every rank is on the one Ray node: they split its cores."""
    import ray

    cores = len(os.sched_getaffinity(0))
    for world_size in (1, 2):
        learners = make_learners(world_size)
        threads = ray.get([rank.__ray_call__.remote(_torch_threads) for rank in learners.ranks])
        assert threads == [max(1, cores // world_size)] * world_size


def test_a_single_step_update_takes_the_old_policy_from_its_own_forward(tiny_dirs, batch):
    from transformers import AutoModelForCausalLM

    from grpo_trainer.batch import shard_batch
    from grpo_trainer.learner.forward import batched_logprobs
    from grpo_trainer.learner.parallel import DataParallel
    from grpo_trainer.learner.update import update_policy

    settings = AlgorithmSettings(kl_coef=0.0)
    [shard] = shard_batch(batch, 1, 32)
    single = UpdatePlan(1, 32, 8, 1.0, 12)

    def update(precomputed_old: bool):
        model = AutoModelForCausalLM.from_pretrained(tiny_dirs["model"], dtype=torch.float32)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
        data = dict(shard)
        if precomputed_old:
            data["old_log_prob"] = batched_logprobs(model, data, 1.0, single.micro_batch_size)
        metrics = update_policy(model, optimizer, data, single, settings, DataParallel(False))
        return model.state_dict(), metrics

    with_pass, m_pass = update(precomputed_old=True)
    without, m_without = update(precomputed_old=False)
    assert max_diff(with_pass, without) < 1e-6
    for key in ("loss", "pg_loss", "grad_norm", "logprob_mismatch", "max_abs_log_ratio"):
        assert m_pass[key] == pytest.approx(m_without[key], rel=1e-5, abs=1e-7), key
    assert m_without["logprob_mismatch"] > 0  # measured against the engine's logprobs

    two_steps = UpdatePlan(1, 16, 8, 1.0, 12)  # the policy moves after the first mini-batch
    model = AutoModelForCausalLM.from_pretrained(tiny_dirs["model"], dtype=torch.float32)
    with pytest.raises(ValueError, match="old_log_prob"):
        update_policy(model, torch.optim.AdamW(model.parameters()), dict(shard), two_steps,
                      settings, DataParallel(False))
