"""What one training step reports: a structured record and its one-line progress form."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from grpo_operator.api.report import PhaseSeconds, StepFigures
from grpo_trainer.rewards.batch import RewardFailures

if TYPE_CHECKING:
    from grpo_trainer.evaluation import Evaluation


@dataclass(frozen=True)
class StepMetrics:
    """Figures of optimizer step ``step`` (1-based: the number of steps completed).

    Rewards and lengths are over the step's ``promptsPerStep x groupSize`` completions; the
    learner figures are means over the step's optimizer updates (``ppoEpochs x`` mini-batches).
    ``kl`` is None when klCoef is 0 (no reference model). ``evaluation``: the evaluation of
    the step's weights, when one was due.
    """

    step: int
    reward_mean: float
    reward_std: float
    kl: float | None
    clip_frac_high: float  # tokens clipped at 1 + clipRatioHigh (positive advantage)
    clip_frac_low: float  # tokens clipped at 1 - clipRatioLow (negative advantage)
    dual_clip_frac: float
    pg_loss: float
    loss: float
    entropy: float
    approx_kl: float  # old vs current policy (k1), verl's ppo_kl
    max_abs_log_ratio: float  # max |logp - old| seen on a response token
    logprob_mismatch: float  # mean |learner old logprob - engine logprob| per token
    grad_norm: float  # before clipping, mean over the updates
    learning_rate: float
    optimizer_steps: int
    skipped_steps: int  # updates dropped for a non-finite gradient
    response_length_mean: float
    response_length_max: int
    truncated_fraction: float  # completions that hit maxResponseTokens
    prompt_tokens: int
    generated_tokens: int
    tokens_per_second: float  # generated tokens / whole step time
    time_generate_s: float
    time_reward_s: float
    time_learn_s: float  # the whole learner call: the passes below, transfers and waits
    time_old_logprobs_s: float | None  # None: the update's own forward supplied them
    time_ref_logprobs_s: float | None  # None: no reference model
    time_update_s: float  # forward/backward passes and optimizer steps
    time_sync_s: float
    time_step_s: float
    mismatch_kl: float | None = None  # k3 KL(engine || learner) per token (rollout_correction)
    # The rollout correction's (None when it is off): mean importance weight, its effective
    # sample size, tokens whose ratio fell outside the bounds.
    is_weight_mean: float | None = None
    is_effective_sample_size: float | None = None
    is_outside_fraction: float | None = None
    reward_failures: RewardFailures = field(default_factory=RewardFailures)  # scored 0: failed
    # With dynamic sampling (None without): generation rounds, groups left out, uniform groups
    # trained on because the rounds ran out.
    generation_rounds: int | None = None
    filtered_groups: int | None = None
    shortfall_groups: int | None = None
    prompt_indices: tuple[int, ...] = ()  # the sampled dataset rows (sampler order)
    scores: tuple[float, ...] = ()  # every completion's reward, group by group
    evaluation: Evaluation | None = None

    @property
    def clip_frac(self) -> float:
        """Both sides' clipped share (verl's pg_clipfrac)."""
        return self.clip_frac_high + self.clip_frac_low

    def figures(self, checkpoint_s: float | None = None) -> StepFigures:
        """The report's form (``checkpoint_s``: the step's checkpoint write, if it wrote one).
        Shares are clamped to [0, 1] against rounding; a non-finite gradient norm is left out
        (every update was skipped)."""
        return StepFigures(
            step=self.step,
            clip_fraction_high=_share(self.clip_frac_high),
            clip_fraction_low=_share(self.clip_frac_low),
            dual_clip_fraction=_share(self.dual_clip_frac),
            entropy=max(0.0, self.entropy),
            approx_kl=self.approx_kl,
            policy_loss=self.pg_loss,
            grad_norm=self.grad_norm if math.isfinite(self.grad_norm) else None,
            learning_rate=self.learning_rate,
            logprob_mismatch=self.logprob_mismatch,
            response_length_mean=self.response_length_mean,
            response_length_max=self.response_length_max,
            truncated_fraction=_share(self.truncated_fraction),
            skipped_updates=self.skipped_steps,
            mismatch_kl=None if self.mismatch_kl is None else max(0.0, self.mismatch_kl),
            importance_weight_mean=self.is_weight_mean,
            effective_sample_size=_optional_share(self.is_effective_sample_size),
            correction_outside_fraction=_optional_share(self.is_outside_fraction),
            generation_rounds=self.generation_rounds,
            filtered_groups=self.filtered_groups,
            shortfall_groups=self.shortfall_groups,
            reward_errors=self.reward_failures.errors,
            reward_timeouts=self.reward_failures.timeouts,
            reward_invalid=self.reward_failures.invalid,
            seconds=PhaseSeconds(
                generate=self.time_generate_s, reward=self.time_reward_s,
                old_logprobs=self.time_old_logprobs_s, ref_logprobs=self.time_ref_logprobs_s,
                update=self.time_update_s, sync=self.time_sync_s, checkpoint=checkpoint_s,
                eval=self.evaluation.figures.seconds if self.evaluation else None,
                step=self.time_step_s),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the evaluation as its report figures)."""
        evaluation = self.evaluation
        return asdict(replace(self, evaluation=None)) | {
            "evaluation": evaluation.figures.model_dump(mode="json") if evaluation else None}

    def progress_line(self) -> str:
        kl = "-" if self.kl is None else f"{self.kl:.4f}"
        return (
            f"step {self.step} reward {self.reward_mean:.3f}±{self.reward_std:.3f} kl {kl} "
            f"clip {self.clip_frac:.3f} len {self.response_length_mean:.1f} "
            f"tok/s {self.tokens_per_second:.0f} "
            f"time gen {self.time_generate_s:.2f}s learn {self.time_learn_s:.2f}s "
            f"sync {self.time_sync_s:.2f}s mismatch {self.logprob_mismatch:.2e}"
            + (f" is-weight {self.is_weight_mean:.3f}" if self.is_weight_mean is not None
               else "")
            + (f" skipped {self.skipped_steps}" if self.skipped_steps else "")
            + (f" reward-failures {self.reward_failures.total}" if self.reward_failures.total
               else "")
            + (f" rounds {self.generation_rounds} filtered {self.filtered_groups} short "
               f"{self.shortfall_groups}" if self.generation_rounds is not None else "")
        )


def _share(value: float) -> float:
    return min(1.0, max(0.0, value))


def _optional_share(value: float | None) -> float | None:
    return None if value is None else _share(value)
