"""Step records for the trainer's reporting tests: one step's metrics, one evaluation."""

from __future__ import annotations

from grpo_operator.api.status import EvalFigures
from grpo_trainer.evaluation import Evaluation
from grpo_trainer.step_metrics import StepMetrics

# A step with neutral figures; tests replace() what they look at.
STEP = StepMetrics(
    step=0, reward_mean=0.5, reward_std=0.1, kl=None, clip_frac_high=0.0, clip_frac_low=0.0,
    dual_clip_frac=0.0, pg_loss=0.0, loss=0.0, entropy=1.0, approx_kl=0.0,
    max_abs_log_ratio=0.0, logprob_mismatch=0.0, grad_norm=1.0, learning_rate=1e-5,
    optimizer_steps=1, skipped_steps=0, response_length_mean=4.0, response_length_max=6,
    truncated_fraction=0.0, prompt_tokens=8, generated_tokens=8, tokens_per_second=8.0,
    time_generate_s=0.0, time_reward_s=0.0, time_learn_s=0.0, time_old_logprobs_s=None,
    time_ref_logprobs_s=None, time_update_s=0.0, time_sync_s=0.0, time_step_s=0.0)


def evaluation(step: int, pass_at_1: float = 0.5) -> Evaluation:
    """An evaluation of two samples on four prompts, scored ``pass_at_1``."""
    return Evaluation(EvalFigures(step=step, prompts=4, samples=2, reward_mean=pass_at_1,
                                  pass_at_1=pass_at_1, pass_at_k=0.75, response_length_mean=3.0,
                                  seconds=0.25), prompt_tokens=40, generated_tokens=24)
