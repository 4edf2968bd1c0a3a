"""The trainer's report: one JSON document under one key of the report ConfigMap.

The trainer replaces the document whole on each write, with its attempt number and a sequence
number that grows within the attempt. The operator mirrors an accepted report into
status.ledger/recovery/terminal and ignores a report that is invalid, oversized or stale (from
an older attempt, or not newer than the last accepted one): a late write from attempt N must not
overwrite attempt N+1.

Parsing is strict: unknown fields, a wrong schemaVersion, wrong JSON types and inconsistent
states are refused with a message naming the field.

Integrity: anyone who may patch ConfigMaps in the namespace can write the report, so a report
counts only with its signature under REPORT_SIGNATURE_KEY: HMAC-SHA256 of the document's bytes
under the run's report key, which is in the run's report-key Secret that only the driver pod
mounts (the Ray pods, where Ray-token holders run code, never see it; the operator derives the
key, see ``grpo_operator.signing``). A sequence may grow
by at most MAX_SEQUENCE_STEP between accepted reports, so one report cannot make every later
genuine one look stale.
"""

from __future__ import annotations

import hashlib
import hmac
from enum import StrEnum

from pydantic import Field, ValidationError

from grpo_operator.api.base import ApiModel, Rule, Timestamp, schema_version_type
from grpo_operator.api.contract import ContractVersionText
from grpo_operator.api.status import (
    Attempt,
    AttemptFailure,
    Count,
    Finite,
    Fraction,
    NonNegative,
    ReportCursor,
    Step,
    TrainerLedger,
    TrainerProgress,
    TrainerRecovery,
    TrainerTerminal,
)

REPORT_SCHEMA_VERSION = 1
REPORT_KEY = "report.json"
REPORT_SIGNATURE_KEY = "report.json.hmac"
"""The ConfigMap key of the report's signature (hex HMAC-SHA256), written with the report in
one patch."""
MAX_SEQUENCE_STEP = 100_000
"""How far a report's sequence may move past the last accepted one (or past 0, for an
attempt's first): the trainer numbers every report it publishes, a few per step."""
# A ConfigMap holds at most 1 MiB; a report is a few KiB. The limit leaves room and catches a
# runaway message long before etcd would.
MAX_REPORT_BYTES = 64 * 1024
ReportSchemaVersion = schema_version_type(REPORT_SCHEMA_VERSION)


class ReportError(ValueError):
    """A report that must be ignored: invalid, oversized, or not parseable."""


class TrainerState(StrEnum):
    """What the trainer is doing as of the report."""

    STARTING = "Starting"
    """Loading, verifying inputs, restoring a checkpoint."""
    RUNNING = "Running"
    """Training."""
    SUSPENDED = "Suspended"
    """Stopped on request after writing a checkpoint (lastCheckpoint is set)."""
    FINISHED = "Finished"
    """Ended; `terminal` says how."""


class PhaseSeconds(ApiModel):
    """How long the phases of a step took, in seconds."""

    generate: NonNegative
    """Generating the step's completions (rollouts reused from the journal take none)."""
    reward: NonNegative
    """Scoring them (the reward function's own time)."""
    old_logprobs: NonNegative | None = None
    """The old policy's logprob pass; unset when the update's own forward supplied them (one
    optimizer step per batch)."""
    ref_logprobs: NonNegative | None = None
    """The reference model's logprob pass; unset without a reference (klCoef 0)."""
    update: NonNegative
    """Forward/backward passes and optimizer steps."""
    sync: NonNegative
    """Putting the new weights into the rollout engines."""
    checkpoint: NonNegative | None = None
    """How long the checkpoint of this step held up training: handing its state to the
    writers (after waiting for the previous checkpoint, if that was still being written); the
    writing and sealing go on while the next step generates. Unset when the step wrote none."""
    eval: NonNegative | None = None
    """Evaluating the step's weights on the validation file; unset when none was due."""
    step: NonNegative
    """The whole step, checkpoint and evaluation excluded."""


class StepFigures(ApiModel):
    """The learner's and the rollouts' figures of one step (means over the step's optimizer
    updates; lengths over its completions)."""

    step: Step
    """The step they are of (1-based: steps completed)."""
    clip_fraction_high: Fraction
    """Response tokens whose ratio was clipped above (positive advantage)."""
    clip_fraction_low: Fraction
    """Response tokens whose ratio was clipped below (negative advantage)."""
    dual_clip_fraction: Fraction
    """Response tokens the dual clip bounded (negative advantage, ratio past clipRatioC)."""
    entropy: NonNegative
    """Mean per-token entropy of the policy, in nats."""
    approx_kl: Finite
    """Mean k1 estimate of KL(old policy, current policy) over response tokens."""
    policy_loss: Finite
    """The policy-gradient term of the loss."""
    grad_norm: NonNegative | None = None
    """Mean gradient norm before clipping; unset when no update had a finite one."""
    learning_rate: NonNegative
    """The optimizer's learning rate."""
    logprob_mismatch: NonNegative
    """Mean |learner − engine| logprob per response token (nats): how far the rollouts'
    sampling probabilities are from the learner's."""
    response_length_mean: NonNegative
    """Mean completion length, in tokens."""
    response_length_max: Count
    """Longest completion, in tokens."""
    truncated_fraction: Fraction
    """Completions cut at maxResponseTokens."""
    skipped_updates: Count
    """Optimizer updates dropped for a non-finite gradient."""
    mismatch_kl: NonNegative | None = None
    """k3 estimate of KL(engine || learner) per response token: how far the distribution the
    engine sampled from is from the learner's (topP/topK sampling, dtype, kernels)."""
    importance_weight_mean: NonNegative | None = None
    """The rollout correction's mean importance weight per response token (unset: the
    correction is off)."""
    effective_sample_size: Fraction | None = None
    """The rollout correction's effective sample size, mean(w)^2 / mean(w^2)."""
    correction_outside_fraction: Fraction | None = None
    """Response tokens whose importance ratio fell outside [ratioMin, ratioMax] (truncated or
    masked, as rolloutCorrection.mode says)."""
    generation_rounds: Count | None = None
    """With dynamic sampling: the generation rounds the step took."""
    filtered_groups: Count | None = None
    """With dynamic sampling: prompt groups generated but left out of the step (all their
    completions scored the same)."""
    shortfall_groups: Count | None = None
    """With dynamic sampling: uniform groups the step trained on because its rounds ran out."""
    reward_errors: Count = 0
    """Completions whose reward could not be had (a python reward that raised or whose worker
    died, an http request that failed after its retries): scored 0."""
    reward_timeouts: Count = 0
    """Completions whose reward call or request timed out: scored 0."""
    reward_invalid: Count = 0
    """Completions whose reward was not a finite number: scored 0."""
    seconds: PhaseSeconds
    """Where the step's time went."""


def _steps_consistent(r: Report) -> bool:
    done = r.ledger.completed_steps
    checkpoint = r.recovery.last_checkpoint
    artifact = r.terminal.artifact if r.terminal else None
    return (
        (checkpoint is None or checkpoint.step <= done)
        and (artifact is None or artifact.step <= done)
        and (r.recovery.resumed_from_step is None or r.recovery.resumed_from_step <= done)
    )


class Report(ApiModel):
    """The trainer's report (schemaVersion 1)."""

    schema_version: ReportSchemaVersion
    """Always 1 in this version."""
    contract_version: ContractVersionText | None = None
    """The contract version the trainer image speaks (``api.contract``); absent: 1.0. The
    operator reads it before the rest, and refuses an image it cannot work with."""
    attempt: Attempt
    """The attempt that wrote it (the run config's attempt)."""
    sequence: Count
    """Grows with every write within an attempt, starting at 0."""
    time: Timestamp
    """When it was written."""
    state: TrainerState
    """What the trainer is doing."""
    ledger: TrainerLedger = Field(default_factory=TrainerLedger)
    """Progress and spending."""
    recovery: TrainerRecovery = Field(default_factory=TrainerRecovery)
    """Checkpoints and rollout reuse."""
    progress: TrainerProgress | None = None
    """What the trainer is doing and how long the rest should take."""
    last_step: StepFigures | None = None
    """The figures of this attempt's latest step (unset before its first)."""
    terminal: TrainerTerminal | None = None
    """Set exactly when state is Finished."""
    failure: AttemptFailure | None = None
    """Set when the trainer ends this attempt with a retryable failure it can name (the next
    attempt resumes from the checkpoint). The exit code decides what the operator does; this
    only says why, in the Recovering condition and a Warning Event."""

    RULES = (
        Rule(
            cel=None,
            message="terminal must be set exactly when state is Finished",
            check=lambda r: (r.state == TrainerState.FINISHED) == (r.terminal is not None),
        ),
        Rule(
            cel=None,
            message="recovery.lastCheckpoint is required when state is Suspended",
            check=lambda r: (
                r.state != TrainerState.SUSPENDED or r.recovery.last_checkpoint is not None
            ),
        ),
        Rule(
            cel=None,
            message="recovery.lastCheckpoint.step, terminal.artifact.step and "
            "recovery.resumedFromStep must not exceed ledger.completedSteps",
            check=_steps_consistent,
        ),
    )

    def to_json(self) -> str:
        """The document to store under REPORT_KEY (raises ReportError when oversized)."""
        text = self.model_dump_json(by_alias=True, exclude_none=True)
        _check_size(len(text.encode()))
        return text

    @property
    def cursor(self) -> ReportCursor:
        return ReportCursor(attempt=self.attempt, sequence=self.sequence)


def _check_size(size: int) -> None:
    if size > MAX_REPORT_BYTES:
        raise ReportError(f"report is {size} bytes, over the limit of {MAX_REPORT_BYTES}")


def describe_validation_error(exc: ValidationError) -> str:
    """One line per error, each starting with the dotted wire path of the offending field."""
    lines = []
    for err in exc.errors(include_url=False):
        path = ".".join(str(p) for p in err["loc"]) or "(document)"
        lines.append(f"{path}: {err['msg']}")
    return "; ".join(lines)


def parse_report(data: str | bytes) -> Report:
    """Parse and validate a report document strictly; raises ReportError naming the field."""
    raw = data.encode() if isinstance(data, str) else data
    _check_size(len(raw))
    try:
        return Report.model_validate_json(raw)
    except ValidationError as exc:
        raise ReportError(describe_validation_error(exc)) from None


def sign_report(key: bytes, report_json: str) -> str:
    """The report's signature under the run's report key."""
    return hmac.new(key, report_json.encode(), hashlib.sha256).hexdigest()


def signature_valid(key: bytes, report_json: str, signature: str | None) -> bool:
    """Whether ``signature`` signs the report under ``key`` (never with an empty key)."""
    return bool(key) and bool(signature) and hmac.compare_digest(
        sign_report(key, report_json), signature.strip())


def is_stale(report: Report | ReportCursor, last_accepted: ReportCursor | None) -> bool:
    """True when `report` is not newer than the last accepted one: from an older attempt, or
    from the same attempt with a lower or equal sequence."""
    if last_accepted is None:
        return False
    cursor = report.cursor if isinstance(report, Report) else report
    return (cursor.attempt, cursor.sequence) <= (last_accepted.attempt, last_accepted.sequence)
