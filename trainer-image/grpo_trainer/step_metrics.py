"""What one training step reports: a structured record and its one-line progress form."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class StepMetrics:
    """Figures of optimizer step ``step`` (1-based: the number of steps completed).

    Rewards and lengths are over the step's ``promptsPerStep x groupSize`` completions; the
    learner figures are means over the step's optimizer updates (``ppoEpochs x`` mini-batches).
    ``kl`` is None when klCoef is 0 (no reference model).
    """

    step: int
    reward_mean: float
    reward_std: float
    kl: float | None
    clip_frac: float  # clip_frac_high + clip_frac_low (verl's pg_clipfrac)
    dual_clip_frac: float
    pg_loss: float
    loss: float
    entropy: float
    approx_kl: float  # old vs current policy (k1), verl's ppo_kl
    max_abs_log_ratio: float  # max |logp - old| seen on a response token
    logprob_mismatch: float  # mean |learner old logprob - engine logprob| per token
    grad_norm: float  # before clipping, mean over the updates
    optimizer_steps: int
    skipped_steps: int  # updates dropped for a non-finite gradient
    response_length_mean: float
    truncated_fraction: float  # completions that hit maxResponseTokens
    prompt_tokens: int
    generated_tokens: int
    tokens_per_second: float  # generated tokens / whole step time
    time_generate_s: float
    time_reward_s: float
    time_learn_s: float
    time_sync_s: float
    time_step_s: float
    prompt_indices: tuple[int, ...] = ()  # the sampled dataset rows (sampler order)
    scores: tuple[float, ...] = ()  # every completion's reward, group by group

    def to_dict(self) -> dict[str, float | int | None]:
        return asdict(self)

    def progress_line(self) -> str:
        kl = "-" if self.kl is None else f"{self.kl:.4f}"
        return (
            f"step {self.step} reward {self.reward_mean:.3f}±{self.reward_std:.3f} kl {kl} "
            f"clip {self.clip_frac:.3f} len {self.response_length_mean:.1f} "
            f"tok/s {self.tokens_per_second:.0f} "
            f"time gen {self.time_generate_s:.2f}s learn {self.time_learn_s:.2f}s "
            f"sync {self.time_sync_s:.2f}s mismatch {self.logprob_mismatch:.2e}"
            + (f" skipped {self.skipped_steps}" if self.skipped_steps else "")
        )
