"""The trainer's exit codes and what the operator makes of them.

The terminal report, when present, is the authority on how a run ended; the exit code of the
driver (which exits with the trainer's code, or with REPORT_NOT_WRITTEN, its own) is the
fallback. All codes are below 128, so they never collide with a signal death (128 + signal
number, e.g. 137 for SIGKILL / OOM kill).
Codes the trainer does not choose (1 for an uncaught exception, 2 for a usage error, anything
else) are treated as retryable: a crash is bounded by runPolicy.maxRestarts.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from grpo_operator.api.constants import Outcome, Reason


class ExitCode(IntEnum):
    """Exit codes of the trainer (and of the driver, which passes the trainer's code on)."""

    SUCCESS = 0
    """Training finished; the terminal report carries the artifact and its digest."""
    INVALID_INPUT = 10
    """The run config, model or dataset is unusable (wrong format, missing file, bad column)."""
    FROZEN_INPUT_CHANGED = 11
    """A frozen input's digest differs from spec or from the digest recorded at the start."""
    BUDGET_EXHAUSTED = 12
    """A budget limit was reached; a checkpoint was written before exiting."""
    SUSPENDED = 13
    """Stopped on request (SIGTERM while suspending); a checkpoint was written."""
    RETRYABLE_FAILURE = 14
    """A failure the trainer judged transient (lost worker, NCCL error); resume from checkpoint."""
    WEIGHT_SYNC_INCOMPLETE = 15
    """A weight sync left a parameter the engine expects without a value: the learner's and
    the engine's models do not match, and a retry would fail the same way."""
    WEIGHT_SYNC_MISMATCH = 16
    """The engines' sampling logprobs disagree with the learners' beyond
    rollout.maxLogprobMismatch (a stale or corrupted sync); the step was not trained on and the
    next attempt resumes from the checkpoint."""
    REPORT_NOT_WRITTEN = 17
    """The driver's own, not the trainer's: the trainer ended (its terminal report says how)
    but the driver could not write that report into the report ConfigMap, retries included
    (a trainer's code in NON_RETRYABLE_EXIT_CODES is kept instead: it ends the run as the
    report would have). Retryable: the next attempt resumes from the final checkpoint and
    reports the end again (a finished run's final checkpoint is kept and its artifact sealed
    again)."""
    INCOMPATIBLE_CONTRACT = 18
    """The trainer image cannot run this run config: another contract major version, or a
    field newer than the image (``api.contract``); the driver log names it."""

    @property
    def retryable(self) -> bool:
        return self in (ExitCode.RETRYABLE_FAILURE, ExitCode.WEIGHT_SYNC_MISMATCH,
                        ExitCode.REPORT_NOT_WRITTEN)

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]


_MEANINGS = {
    ExitCode.SUCCESS: "training finished",
    ExitCode.INVALID_INPUT: "invalid input",
    ExitCode.FROZEN_INPUT_CHANGED: "a frozen input changed",
    ExitCode.BUDGET_EXHAUSTED: "budget exhausted (checkpoint written)",
    ExitCode.SUSPENDED: "suspended (checkpoint written)",
    ExitCode.RETRYABLE_FAILURE: "retryable failure",
    ExitCode.WEIGHT_SYNC_INCOMPLETE: "the weight sync left engine parameters without a value",
    ExitCode.WEIGHT_SYNC_MISMATCH: "the engines' logprobs disagree with the learners'",
    ExitCode.REPORT_NOT_WRITTEN: "the trainer's terminal report could not be written",
    ExitCode.INCOMPATIBLE_CONTRACT: "the trainer image cannot run this operator's run config "
    "(the driver log says which field or version)",
}

# For the driver Job's podFailurePolicy (rule action FailJob, operator In): the codes that end
# the run. Kubernetes refuses 0 in an `In` rule, and SUCCESS is not a failure anyway.
NON_RETRYABLE_EXIT_CODES: tuple[int, ...] = (
    int(ExitCode.INVALID_INPUT),
    int(ExitCode.FROZEN_INPUT_CHANGED),
    int(ExitCode.BUDGET_EXHAUSTED),
    int(ExitCode.WEIGHT_SYNC_INCOMPLETE),
    int(ExitCode.INCOMPATIBLE_CONTRACT),
)

SIGNAL_EXIT_BASE = 128


@dataclass(frozen=True)
class ExitDisposition:
    """What an exit means for the run.

    `outcome` is the terminal outcome the exit implies when nothing else is known: None for a
    suspension (not an end) and for retryable exits (the run ends as Failed only when no restart
    remains, which the operator decides). Exit 0 implies Succeeded, but the operator marks a run
    Succeeded only with the trainer's terminal report carrying an artifact digest.
    """

    code: int | None
    retryable: bool
    outcome: Outcome | None
    reason: Reason
    message: str


def classify_exit(code: int | None) -> ExitDisposition:
    """Map the driver's exit code (None: the pod vanished without one) to its disposition."""
    if code is None:
        return ExitDisposition(
            None, True, None, Reason.POD_VANISHED, "the driver pod vanished without an exit code"
        )
    if code < 0:
        raise ValueError(f"exit code must be >= 0, got {code}")
    if code >= SIGNAL_EXIT_BASE:
        signal = code - SIGNAL_EXIT_BASE
        return ExitDisposition(
            code, True, None, Reason.KILLED, f"the driver was killed by signal {signal} ({code})"
        )
    try:
        known = ExitCode(code)
    except ValueError:
        return ExitDisposition(
            code, True, None, Reason.UNEXPECTED_EXIT, f"the trainer exited with code {code}"
        )
    outcome, reason = _KNOWN[known]
    return ExitDisposition(code, known.retryable, outcome, reason, f"{known.meaning} ({code})")


_KNOWN: dict[ExitCode, tuple[Outcome | None, Reason]] = {
    ExitCode.SUCCESS: (Outcome.SUCCEEDED, Reason.COMPLETED),
    ExitCode.INVALID_INPUT: (Outcome.FAILED, Reason.INVALID_INPUT),
    ExitCode.FROZEN_INPUT_CHANGED: (Outcome.FAILED, Reason.FROZEN_INPUT_CHANGED),
    ExitCode.BUDGET_EXHAUSTED: (Outcome.FAILED, Reason.BUDGET_EXHAUSTED),
    ExitCode.SUSPENDED: (None, Reason.SUSPENDED),
    ExitCode.RETRYABLE_FAILURE: (None, Reason.RETRYABLE_FAILURE),
    ExitCode.WEIGHT_SYNC_INCOMPLETE: (Outcome.FAILED, Reason.WEIGHT_SYNC_INCOMPLETE),
    ExitCode.WEIGHT_SYNC_MISMATCH: (None, Reason.WEIGHT_SYNC_MISMATCH),
    ExitCode.REPORT_NOT_WRITTEN: (None, Reason.REPORT_NOT_WRITTEN),
    ExitCode.INCOMPATIBLE_CONTRACT: (Outcome.FAILED, Reason.INCOMPATIBLE_TRAINER),
}
