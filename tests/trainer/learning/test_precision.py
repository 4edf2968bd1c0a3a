"""The learner's numerics and memory: bfloat16 mixed precision over float32 master weights
within its parity bound, gradient checkpointing that changes nothing but memory, AdamW's
settings from the spec, and no dropout anywhere in the policy."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.api.training import LearnerDType, RolloutSpec
from grpo_trainer import toy
from grpo_trainer.algorithm_settings import AlgorithmSettings
from grpo_trainer.learner.actor import LearnerSettings
from grpo_trainer.learner.model import load_model
from grpo_trainer.learner.update import UpdatePlan
from grpo_trainer.rewards.char_fraction import CharFractionReward

from .conftest import max_diff

# rollout.maxLogprobMismatch's default for a bfloat16 learner against a float32 engine
BF16_BOUND = RolloutSpec(dtype="float32").logprob_mismatch_limit(1.0, LearnerDType.BFLOAT16)


def _on_rank(learners, probe):
    import ray

    return ray.get(learners.ranks[0].__ray_call__.remote(probe))


def _master_dtypes(actor) -> set[str]:
    return {str(p.dtype) for p in actor.model.parameters()}


def test_a_bfloat16_learner_trains_within_its_parity_bound(make_trainer):
    reward = CharFractionReward()
    exact = make_trainer(reward, maxSteps=1)
    [fp32] = exact.train()
    mixed = make_trainer(reward, maxSteps=3, learner={"dtype": "bfloat16"})
    steps = mixed.train()
    assert [m.step for m in steps] == [1, 2, 3]  # the guard let every step train
    mismatch = [m.logprob_mismatch for m in steps]
    # Computed in bf16 against a float32 engine: far from float32's parity (about 1e-3 here,
    # which a float32 learner's 1e-3 guard would refuse), within bf16's bound.
    assert fp32.logprob_mismatch < 1e-5 < min(mismatch), (fp32.logprob_mismatch, mismatch)
    assert max(mismatch) < BF16_BOUND, mismatch
    assert all(torch.isfinite(torch.tensor([m.loss, m.grad_norm])).all() for m in steps)
    assert _on_rank(mixed.learners, _master_dtypes) == {"torch.float32"}  # master weights


def test_gradient_checkpointing_changes_memory_not_results(make_learners, batch):
    settings = AlgorithmSettings(kl_coef=0.01)
    plain = make_learners(1, settings)
    recomputing = make_learners(1, settings, gradient_checkpointing=True)
    assert _on_rank(recomputing, lambda a: a.model.is_gradient_checkpointing) is True
    assert _on_rank(plain, lambda a: a.model.is_gradient_checkpointing) is False
    plan = UpdatePlan(1, 16, 4, 1.0, 12)  # two optimizer steps of 16, micro-batches of 4
    m_plain = plain.update(batch, plan, mini_batch_size=16)
    m_recomputing = recomputing.update(batch, plan, mini_batch_size=16)
    for key in ("loss", "pg_loss", "kl", "grad_norm"):
        assert m_recomputing[key] == pytest.approx(m_plain[key], rel=1e-5, abs=1e-7), key
    assert max_diff(plain.states()[0], recomputing.states()[0]) < 1e-6


def test_adamw_takes_the_specs_decay_and_betas(make_learners, tiny_dirs):
    doc = toy.tiny_spec(tiny_dirs["model"], tiny_dirs["data"], "/c", weightDecay=0.01,
                        adamBeta1=0.8, adamBeta2=0.95)
    spec = GRPORunSpec.model_validate(doc | {"learner": {"gradientCheckpointing": True}})
    settings = LearnerSettings.from_spec(spec, str(tiny_dirs["model"]), AlgorithmSettings())
    assert (settings.weight_decay, settings.betas, settings.compute_dtype,
            settings.gradient_checkpointing) == (0.01, (0.8, 0.95), "float32", True)
    learners = make_learners(1, weight_decay=0.01, betas=(0.8, 0.95))
    group = _on_rank(learners, lambda a: {k: a.optimizer.param_groups[0][k]
                                          for k in ("weight_decay", "betas")})
    assert group == {"weight_decay": 0.01, "betas": (0.8, 0.95)}


def test_the_policy_has_no_dropout_even_in_train_mode(tiny_dirs, tmp_path):
    from transformers import AutoModelForCausalLM

    model_dir = tmp_path / "model"
    shutil.copytree(tiny_dirs["model"], model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps(config | {"attention_dropout": 0.5}))
    ids = torch.tensor([[5, 9, 13, 17, 21, 25, 29, 33]])

    def twice(model):
        torch.manual_seed(0)
        first = model(input_ids=ids).logits
        return first, model(input_ids=ids).logits

    as_shipped = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    as_shipped.train()
    a, b = twice(as_shipped)
    assert not torch.equal(a, b)  # the config's dropout is live in train mode
    policy = load_model(str(model_dir), torch.device("cpu"), trainable=True,
                        gradient_checkpointing=True)
    assert policy.training
    a, b = twice(policy)
    assert torch.equal(a, b)
    policy.eval()
    assert torch.equal(policy(input_ids=ids).logits, a)  # the same function as eval mode
