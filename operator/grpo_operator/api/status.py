"""`GRPORun.status`, and the parts of it the trainer reports (see `report.py`).

The trainer's report carries `TrainerLedger`, `TrainerRecovery` and `TrainerTerminal`; status
extends each with what only the operator knows (metered GPU time, restarts and their history,
the cleanup receipt). Lists are bounded so that status stays far below etcd's 1 MiB limit.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

from pydantic import Field

from grpo_operator.api.base import (
    ApiModel,
    Rule,
    Sha256,
    StrictBool,
    StrictFloat,
    StrictInt,
    Timestamp,
)
from grpo_operator.api.base import StrictStr as Str
from grpo_operator.api.constants import (
    MAX_ATTEMPT,
    ConditionStatus,
    ConditionType,
    Outcome,
    Phase,
    TrainerActivity,
)

MAX_HISTORY = 20
MAX_SEEN_RETRY_IDS = 16
MAX_RETRY_ID_LENGTH = 253
MAX_CONDITIONS = 16
MAX_MESSAGE_LENGTH = 4096
MAX_EVALS = 5

Count = Annotated[StrictInt, Field(ge=0, le=2**53)]
Step = Annotated[StrictInt, Field(ge=0, le=10_000_000)]
Attempt = Annotated[StrictInt, Field(ge=1, le=MAX_ATTEMPT)]
# Bounds stay within int64: kubectl turns integral YAML numbers into integers.
Finite = Annotated[StrictFloat, Field(allow_inf_nan=False, ge=-1e15, le=1e15)]
NonNegative = Annotated[StrictFloat, Field(allow_inf_nan=False, ge=0, le=1e15)]
Fraction = Annotated[StrictFloat, Field(allow_inf_nan=False, ge=0, le=1)]
InPodPath = Annotated[Str, Field(min_length=1, max_length=1024, pattern=r"^/")]
ReasonText = Annotated[
    Str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
]
Message = Annotated[Str, Field(max_length=MAX_MESSAGE_LENGTH)]
ObjectName = Annotated[Str, Field(min_length=1, max_length=253)]

T = TypeVar("T")


def bounded(items: list[T], item: T, limit: int) -> list[T]:
    """`items` with `item` appended, keeping the newest `limit` entries."""
    return [*items, item][-limit:]


class Condition(ApiModel):
    """A metav1.Condition."""

    type: Str = Field(min_length=1, max_length=316)
    """One of the ConditionType values (Accepted, ClusterReady, Running, Recovering, Suspended,
    Succeeded, Failed, and the kstatus ones: Reconciling, Stalled, Ready)."""
    status: ConditionStatus
    """True, False or Unknown."""
    observed_generation: StrictInt | None = Field(default=None, ge=0)
    """The spec generation the condition was computed from."""
    last_transition_time: Timestamp
    """When status last changed."""
    reason: ReasonText
    """CamelCase reason."""
    message: Message = ""
    """Human-readable details."""


class CheckpointRef(ApiModel):
    """A complete, verified checkpoint."""

    step: Step
    """The optimizer step it holds."""
    path: InPodPath
    """Its directory, in-pod (/checkpoints/<run-uid>/step_N)."""
    sha256: Sha256
    """sha256 of its digest manifest."""
    time: Timestamp
    """When it was written."""


class RolloutReuse(ApiModel):
    """Counts of the rollout recovery (prompt-group lineage), cumulative over the run."""

    sealed_groups: Count = 0
    """Prompt groups whose completions were all generated and journaled."""
    reused_groups: Count = 0
    """Journaled groups reused after a restart (their weight version matched the checkpoint)."""
    abandoned_attempts: Count = 0
    """Physical generation attempts abandoned (failed engine, restart)."""
    batch_shortfall: Count = 0
    """Sequences a step went without because generation could not be completed."""


class ArtifactRef(ApiModel):
    """The trained model: a Hugging Face directory on the checkpoint volume."""

    path: InPodPath
    """In-pod directory (/checkpoints/<run-uid>/artifact)."""
    step: Step
    """The optimizer step it was saved at."""
    sha256: Sha256
    """sha256 of its digest manifest."""


class EvalFigures(ApiModel):
    """One evaluation on the validation file (algorithm.evalIntervalSteps)."""

    step: Step
    """The steps completed when it ran: the weights it evaluated."""
    prompts: StrictInt = Field(ge=1, le=1_000_000)
    """Validation prompts scored."""
    samples: StrictInt = Field(ge=1, le=64)
    """Completions per prompt (algorithm.evalSamples)."""
    reward_mean: Finite
    """Mean reward over every completion."""
    pass_at_1: Fraction
    """Share of completions that pass (reward 1), averaged per prompt: the unbiased pass@1."""
    pass_at_k: Fraction | None = None
    """pass@k with k = samples: the share of prompts with at least one passing completion;
    unset with one sample."""
    response_length_mean: NonNegative
    """Mean completion length, in tokens."""
    seconds: NonNegative
    """Generating and scoring it."""


class TrainerLedger(ApiModel):
    """Progress and spending as the trainer counts them."""

    planned_steps: Step = 0
    """algorithm.maxSteps as the trainer planned it."""
    completed_steps: Step = 0
    """Optimizer steps completed (over all attempts)."""
    prompt_tokens: Count = 0
    """Prompt tokens sent to the rollout engine."""
    generated_tokens: Count = 0
    """Completion tokens generated (all attempts, including discarded work)."""
    reward_mean: Finite | None = None
    """Mean reward of the last step."""
    reward_std: NonNegative | None = None
    """Standard deviation of the rewards of the last step."""
    kl: Finite | None = None
    """Mean KL to the reference model in the last step."""
    tokens_per_second: NonNegative | None = None
    """Generated tokens per second in the last step."""
    eval_prompt_tokens: Count = 0
    """Prompt tokens sent to the rollout engine by evaluations (apart from promptTokens)."""
    eval_generated_tokens: Count = 0
    """Completion tokens evaluations generated (apart from generatedTokens; both count against
    budget.maxGeneratedTokens)."""
    evals: list[EvalFigures] = Field(default_factory=list, max_length=MAX_EVALS)
    """The last evaluations, newest first (at most 5)."""

    @property
    def budget_tokens(self) -> int:
        """What counts against budget.maxGeneratedTokens: training's and evaluations'
        generated tokens."""
        return self.generated_tokens + self.eval_generated_tokens

    RULES = (
        Rule(
            # has(): a section's default ({}) is validated before its fields' defaults apply.
            cel="!has(self.completedSteps) || !has(self.plannedSteps) || "
            "self.completedSteps <= self.plannedSteps",
            message="ledger.completedSteps must not exceed ledger.plannedSteps",
            check=lambda led: led.completed_steps <= led.planned_steps,
        ),
    )


# A remaining time past this says nothing a user can act on; it also bounds the arithmetic.
MAX_REMAINING_SECONDS = 10 * 365 * 86400.0


class TrainerProgress(ApiModel):
    """What the trainer is doing, and how long the rest should take, as it measures them."""

    activity: TrainerActivity
    """VerifyingInputs, RestoringCheckpoint, StartingEngines, Training, Checkpointing or
    SealingArtifact."""
    since: Timestamp
    """When that activity began."""
    step_seconds: NonNegative | None = None
    """Mean duration of the last steps of this attempt (unset before its first step)."""
    remaining_seconds: Annotated[StrictFloat, Field(allow_inf_nan=False, ge=0,
                                                    le=MAX_REMAINING_SECONDS)] | None = None
    """stepSeconds times the steps left (unset before the attempt's first step)."""


class Progress(TrainerProgress):
    """The trainer's progress as the run shows it (`kubectl get grpo`: Done%, ETA)."""

    percent: Annotated[StrictInt, Field(ge=0, le=100)] = 0
    """Completed steps as a percentage of the planned ones, rounded down."""
    estimated_completion_time: Timestamp | None = None
    """The report's time plus remainingSeconds."""
    eta: Annotated[Str, Field(max_length=32)] | None = None
    """remainingSeconds as of the report, for people (e.g. 3m20s)."""


class BudgetRemaining(ApiModel):
    """What is left of spec.budget (absent: no such limit)."""

    generated_tokens: StrictInt | None = None
    """Tokens left of budget.maxGeneratedTokens after training's and evaluations' (negative
    when overspent)."""
    gpu_hours: Finite | None = Field(default=None, alias="gpuHours")
    """GPU-hours left of budget.maxGPUHours (negative when overspent)."""


class Ledger(TrainerLedger):
    """Progress and spending of the run."""

    gpu_seconds: NonNegative = 0.0
    """GPU-seconds metered by the operator from the GPU pods' Running time (all attempts,
    provisioning and recovery included), sampled at least every 30 s."""
    gpu_metered_time: Timestamp | None = None
    """When gpuSeconds was last brought up to date."""
    last_report_time: Timestamp | None = None
    """Time of the last accepted trainer report."""
    budget_remaining: BudgetRemaining | None = None
    """What is left of the budget."""


class AttemptFailure(ApiModel):
    """Why the trainer ended an attempt it expects the next one to get past."""

    reason: ReasonText
    """CamelCase reason (WeightSyncMismatch, ...)."""
    message: Message = ""
    """Human-readable details, with the figures that tripped the check."""


class InputDigests(ApiModel):
    """The frozen inputs' digests (sha256 of each one's digest manifest, as
    `python -m grpo_trainer digest` prints it)."""

    model: Sha256
    """The model directory's."""
    dataset: Sha256
    """The dataset's trainFile and validationFile."""
    reward: Sha256 | None = None
    """A python reward's file (unset for the other rewards)."""


class TrainerRecovery(ApiModel):
    """Recovery state as the trainer sees it."""

    resumed_from_step: Step | None = None
    """The checkpoint step this attempt resumed from (unset: started fresh)."""
    last_checkpoint: CheckpointRef | None = None
    """The newest complete checkpoint."""
    rollout: RolloutReuse = Field(default_factory=RolloutReuse)
    """Rollout reuse counts."""
    inputs: InputDigests | None = None
    """The frozen inputs' digests as the first attempt that reported them found them. The
    operator keeps the first it accepts, and every later attempt must find the same (with
    or without model.sha256 / dataset.sha256 in the spec), or the run fails as
    FrozenInputChanged."""


class RecoveryRecord(ApiModel):
    """One attempt's start."""

    attempt: Attempt
    """The attempt number."""
    reason: ReasonText
    """Why it started (Started, a failure's reason such as RetryableFailure or Interrupted,
    ClusterUnhealthy, Preempted, Resumed, Retry)."""
    time: Timestamp
    """When it started."""
    from_step: Step
    """The checkpoint step it resumes from: the newest the operator knew of when it started
    the attempt (0: from the start). recovery.resumedFromStep is the trainer's own account."""


class Recovery(TrainerRecovery):
    """Attempts, restarts and checkpoints."""

    attempt: StrictInt = Field(default=0, ge=0, le=MAX_ATTEMPT)
    """The current attempt (0: none yet). Driver Jobs are named <run>-a<attempt>."""
    restarts: Count = 0
    """Retryable failures so far (counted against maxRestarts)."""
    max_restarts: Count = 0
    """runPolicy.maxRestarts as last observed."""
    history: list[RecoveryRecord] = Field(default_factory=list, max_length=MAX_HISTORY)
    """The newest attempts, oldest first (at most 20)."""


class TrainerTerminal(ApiModel):
    """How the run ended, as the trainer reports it."""

    outcome: Outcome
    """Succeeded, Failed or Cancelled."""
    reason: ReasonText
    """CamelCase reason (Completed, BudgetExhausted, FrozenInputChanged, ...)."""
    message: Message = ""
    """Human-readable details."""
    finished_time: Timestamp
    """When it ended."""
    artifact: ArtifactRef | None = None
    """The trained model; required when the outcome is Succeeded."""

    RULES = (
        Rule(
            cel="self.outcome != 'Succeeded' || has(self.artifact)",
            message="terminal.artifact (with its sha256) is required when terminal.outcome is "
            "Succeeded",
            check=lambda t: t.outcome != Outcome.SUCCEEDED or t.artifact is not None,
        ),
    )


class Cleanup(ApiModel):
    """Receipt of the teardown, written once the RayCluster is observed gone."""

    ray_cluster_deleted: StrictBool
    """The RayCluster is gone."""
    time: Timestamp
    """When that was observed."""


class Terminal(TrainerTerminal):
    """How the run ended."""

    cleanup: Cleanup | None = None
    """Teardown receipt."""


class Stopping(ApiModel):
    """A stop in progress: the driver was asked to write a checkpoint and exit; once it has
    (or the grace period is over) the RayCluster is deleted and the run is Suspended or ends."""

    reason: ReasonText
    """Suspended, Cancelled, DeadlineExceeded, PreRunningDeadlineExceeded or BudgetExhausted."""
    message: Message = ""
    """Human-readable details."""
    time: Timestamp
    """When the stop was asked for."""


class Children(ApiModel):
    """Names of the objects the operator made for the run."""

    ray_cluster: ObjectName | None = None
    driver_job: ObjectName | None = None
    """The current attempt's driver Job."""
    run_config_map: ObjectName | None = None
    report_config_map: ObjectName | None = None
    service_account: ObjectName | None = None
    auth_secret: ObjectName | None = None
    """The Ray token-authentication Secret."""


class ReportCursor(ApiModel):
    """Position of the last accepted trainer report; older or equal reports are stale."""

    attempt: Attempt
    sequence: Count


class GRPORunStatus(ApiModel):
    """Observed state of a GRPORun, written only by the operator."""

    observed_generation: StrictInt | None = Field(default=None, ge=0)
    """The spec generation last acted on."""
    phase: Phase | None = None
    """Pending, Accepted, Queued, Provisioning, Running, Recovering, Suspended, Succeeded,
    Failed or Cancelled."""
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=MAX_CONDITIONS,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Kubernetes conditions, one per type."""
    start_time: Timestamp | None = None
    """When the run was accepted."""
    pre_running_since: Timestamp | None = None
    """Start of the clock of budget.preRunningDeadlineSeconds: Kueue's admission of the
    RayCluster, or the run's creation without a queue; moved forward by time spent Suspended.
    The clock stops when the cluster is first ready."""
    active_since: Timestamp | None = None
    """Start of the clock of budget.activeDeadlineSeconds: when the cluster was first ready;
    moved forward by time spent Suspended, not reset by restarts."""
    completion_time: Timestamp | None = None
    """When the run reached a terminal phase."""
    children: Children = Field(default_factory=Children)
    """Names of the child objects."""
    ledger: Ledger = Field(default_factory=Ledger)
    """Progress and spending."""
    progress: Progress | None = None
    """What the trainer is doing, the share of steps done, the estimated time left (from the
    last accepted report of the current attempt; unset before the first)."""
    recovery: Recovery = Field(default_factory=Recovery)
    """Attempts, restarts, checkpoints."""
    stopping: Stopping | None = None
    """A stop (suspend, cancel, deadline, GPU budget) waiting for the trainer's checkpoint."""
    terminal: Terminal | None = None
    """How the run ended."""
    accepted_report: ReportCursor | None = None
    """The last trainer report mirrored into status."""
    trainer_contract_version: Annotated[Str, Field(max_length=9)] | None = None
    """The contract version the trainer image of that report speaks (1.0: it announced none;
    see the compatibility rule in docs/api.md)."""
    seen_retry_ids: list[Annotated[Str, Field(max_length=MAX_RETRY_ID_LENGTH)]] = Field(
        default_factory=list, max_length=MAX_SEEN_RETRY_IDS
    )
    """Operation ids of grpo.dev/retry annotations already seen (the newest 16): an id is acted
    on only if the run had Failed when it was first seen."""

    def condition(self, type_: ConditionType | str) -> Condition | None:
        """The condition of that type, if present."""
        return next((c for c in self.conditions if c.type == type_), None)
