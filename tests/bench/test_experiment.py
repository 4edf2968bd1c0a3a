"""Both sides of the trainer benchmark are configured from one ``Experiment``: this trainer's
spec must validate and TRL's config must describe the same run, setting by setting."""

from __future__ import annotations

import pytest

from bench.experiment import EXPERIMENTS, Experiment, by_name
from grpo_operator.api.spec import GRPORunSpec
from grpo_trainer import toy
from grpo_trainer.trainer import TrainerConfig


def _trainer_config(exp: Experiment, tmp_path) -> TrainerConfig:
    raw = toy.tiny_spec(tmp_path, tmp_path, tmp_path)
    raw["algorithm"] = exp.algorithm()
    return TrainerConfig.from_spec(GRPORunSpec.model_validate(raw))


@pytest.mark.parametrize("exp", EXPERIMENTS, ids=lambda e: e.name)
def test_both_sides_run_the_same_experiment(exp, tmp_path):
    ours = _trainer_config(exp, tmp_path)
    plan = ours.update_plan(world_size=1)
    trl = exp.trl_config()

    assert ours.max_steps == trl["max_steps"] == exp.warmup_steps + exp.timed_steps
    assert ours.group_size == trl["num_generations"]
    # One generation and one optimizer step per GRPO step, over the same micro-batches.
    sequences = ours.prompts_per_step * ours.group_size
    assert plan.mini_batch_per_rank == sequences
    assert trl["per_device_train_batch_size"] * trl["gradient_accumulation_steps"] == sequences
    assert plan.micro_batch_size == trl["per_device_train_batch_size"]
    assert ours.ppo_epochs == trl["num_iterations"] == 1
    assert ours.max_response_tokens == trl["max_completion_length"]
    assert ours.max_grad_norm == trl["max_grad_norm"]
    assert (ours.top_p, ours.seed) == (trl["top_p"], trl["seed"])
    algo = ours.algorithm
    assert algo.kl_coef == trl["beta"] > 0 and algo.kl_estimator == "k3"
    assert (algo.clip_ratio_low, algo.clip_ratio_high) == (trl["epsilon"], trl["epsilon_high"])
    assert algo.loss_aggregation == "token-mean" and trl["loss_type"] == "dapo"
    assert algo.normalize_advantage_by_std and trl["scale_rewards"] == "group"
    assert algo.temperature == trl["temperature"]
    # The rollout correction is on, as by default (TRL's vLLM path corrects by default too);
    # with a float32 engine at topP 1 its weights are 1 to float noise.
    assert algo.rollout_correction.level == "token" and ours.top_p == 1.0
    assert exp.algorithm()["learningRate"] == trl["learning_rate"]
    assert trl["bf16"] is False and trl["gradient_checkpointing"] is False


def test_the_bigger_model_has_about_25m_parameters():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    exp = by_name("25M")
    hidden = exp.hidden_size
    # toy.make_tiny_model's recipe, on the meta device (nothing allocated).
    config = LlamaConfig(vocab_size=exp.vocab_size, hidden_size=hidden,
                         intermediate_size=2 * hidden, num_hidden_layers=exp.num_layers,
                         num_attention_heads=hidden // 64, num_key_value_heads=hidden // 64,
                         tie_word_embeddings=False)
    with torch.device("meta"):
        parameters = sum(p.numel() for p in LlamaForCausalLM(config).parameters())
    assert 22e6 < parameters < 28e6


def test_an_experiment_whose_micro_batch_does_not_divide_the_step_is_refused():
    with pytest.raises(ValueError, match="micro-batch"):
        Experiment("odd", hidden_size=128, num_layers=2, prompts_per_step=3, group_size=2,
                   max_response_tokens=8, micro_batch_size=4)
