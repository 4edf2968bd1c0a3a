"""One reconcile pass as a pure function: what was observed in, the new status and the
actions to take out. The controller performs the actions after writing the status, so intent
is recorded before acting and a retried pass finds what the last one made.

Phases handled here: Pending → Accepted → Provisioning → Running → Succeeded | Failed, with
cleanup after the end; Running → Recovering → Running when a driver fails for a retryable
cause and restarts remain; any phase → Cancelled on ``runPolicy.cancel``. Suspend, deadlines
and GPU metering extend this table.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from grpo_operator.acceptance import Refusal, accept
from grpo_operator.api.constants import ConditionType, Outcome, Phase, Reason
from grpo_operator.api.exit_codes import ExitCode, classify_exit
from grpo_operator.api.report import Report, ReportError, is_stale, parse_report
from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.api.status import (
    BudgetRemaining,
    Children,
    Cleanup,
    GRPORunStatus,
    RecoveryRecord,
    Terminal,
    bounded,
)
from grpo_operator.conditions import set_condition
from grpo_operator.health import ClusterHealth, DriverEnd, cluster_health, driver_end
from grpo_operator.naming import ChildNames

# How soon to look again, by what the run waits for.
FAST_REQUEUE_SECONDS = 1.0
STEADY_REQUEUE_SECONDS = 5.0


class Action(StrEnum):
    ENSURE_RUN_CHILDREN = "EnsureRunChildren"  # identity, auth Secret, ConfigMaps, RayCluster
    ENSURE_DRIVER_JOB = "EnsureDriverJob"
    DELETE_DRIVER_JOB = "DeleteDriverJob"  # the current attempt's (SIGTERM: it checkpoints)
    DELETE_RAY_CLUSTER = "DeleteRayCluster"


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Observed:
    name: str
    generation: int
    spec: GRPORunSpec
    status: GRPORunStatus
    now: datetime.datetime
    pvcs: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    ray_cluster: dict[str, Any] | None = None
    driver_job: dict[str, Any] | None = None
    driver_pods: list[dict[str, Any]] = field(default_factory=list)
    report_data: str | None = None


@dataclass
class Decision:
    status: GRPORunStatus
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = STEADY_REQUEUE_SECONDS


def _phase(d: Decision, o: Observed, phase: Phase, message: str) -> None:
    if d.status.phase != phase:
        d.events.append(Event("Normal", str(phase), message))
    d.status.phase = phase


def _condition(d: Decision, o: Observed, type_: ConditionType, value: bool, reason: str,
               message: str = "") -> None:
    d.status.conditions = set_condition(
        d.status.conditions, type_, value, reason, message, generation=o.generation, now=o.now
    )


def _end(d: Decision, o: Observed, outcome: Outcome, reason: str, message: str,
         report: Report | None) -> None:
    """Record the terminal state and start the cleanup."""
    terminal = report.terminal if report and report.terminal else None
    artifact = terminal.artifact if terminal else None
    d.status.terminal = Terminal(
        outcome=outcome, reason=reason, message=message,
        finished_time=terminal.finished_time if terminal else o.now, artifact=artifact,
    )
    d.status.completion_time = o.now
    succeeded = outcome == Outcome.SUCCEEDED
    _condition(d, o, ConditionType.RUNNING, False, reason, message)
    _condition(d, o, ConditionType.SUCCEEDED, succeeded, reason, message)
    _condition(d, o, ConditionType.FAILED, outcome == Outcome.FAILED, reason, message)
    phase = {Outcome.SUCCEEDED: Phase.SUCCEEDED, Outcome.FAILED: Phase.FAILED,
             Outcome.CANCELLED: Phase.CANCELLED}[outcome]
    if phase != d.status.phase:
        d.events.append(Event("Normal" if succeeded else "Warning", str(phase), message))
    d.status.phase = phase
    d.actions.append(Action.DELETE_RAY_CLUSTER)
    d.requeue_after = FAST_REQUEUE_SECONDS


def _refuse(d: Decision, o: Observed, refusal: Refusal) -> None:
    _condition(d, o, ConditionType.ACCEPTED, False, refusal.reason, refusal.message)
    _condition(d, o, ConditionType.FAILED, True, refusal.reason, refusal.message)
    d.status.terminal = Terminal(outcome=Outcome.FAILED, reason=refusal.reason,
                                 message=refusal.message, finished_time=o.now)
    d.status.completion_time = o.now
    d.status.phase = Phase.FAILED
    d.events.append(Event("Warning", refusal.reason, refusal.message))
    d.requeue_after = None


def read_report(o: Observed, status: GRPORunStatus) -> tuple[Report | None, Event | None]:
    """The newest acceptable report of the current attempt, or why the stored one is not."""
    if not o.report_data:
        return None, None
    try:
        report = parse_report(o.report_data)
    except ReportError as e:
        return None, Event("Warning", "ReportRejected", f"invalid report ignored: {e}")
    if report.attempt != status.recovery.attempt:
        return None, Event("Warning", "ReportRejected",
                           f"report of attempt {report.attempt} ignored during attempt "
                           f"{status.recovery.attempt}")
    cursor = status.accepted_report
    if cursor is not None and report.cursor == cursor:
        return report, None  # already mirrored
    if is_stale(report, cursor):
        return None, Event("Warning", "ReportRejected",
                           f"stale report ignored (attempt {report.attempt}, sequence "
                           f"{report.sequence}; already at sequence {cursor.sequence})")
    return report, None


def _mirror(d: Decision, o: Observed, report: Report) -> None:
    s = d.status
    for name in type(report.ledger).model_fields:
        setattr(s.ledger, name, getattr(report.ledger, name))
    s.ledger.last_report_time = report.time
    s.recovery.resumed_from_step = report.recovery.resumed_from_step
    s.recovery.last_checkpoint = report.recovery.last_checkpoint
    s.recovery.rollout = report.recovery.rollout
    s.accepted_report = report.cursor
    budget = o.spec.budget
    if budget.max_generated_tokens is not None:
        s.ledger.budget_remaining = BudgetRemaining(
            generated_tokens=budget.max_generated_tokens - s.ledger.generated_tokens
        )


def _start_attempt(d: Decision, o: Observed, attempt: int, reason: str) -> None:
    s = d.status
    s.recovery.attempt = attempt
    s.recovery.max_restarts = o.spec.run_policy.max_restarts
    s.recovery.history = bounded(
        s.recovery.history,
        RecoveryRecord(attempt=attempt, reason=reason, time=o.now,
                       from_step=s.ledger.completed_steps),
        20,
    )
    s.children.driver_job = ChildNames(o.name).driver_job(attempt)


def _finish_driver(d: Decision, o: Observed, end: DriverEnd, report: Report | None) -> None:
    terminal = report.terminal if report else None
    if end.succeeded and terminal and terminal.outcome == Outcome.SUCCEEDED:
        _end(d, o, Outcome.SUCCEEDED, terminal.reason, terminal.message or "training finished",
             report)
        return
    if terminal is not None:  # the trainer's own account is the authority
        _end(d, o, terminal.outcome, terminal.reason, terminal.message, report)
        return
    if end.succeeded:
        _end(d, o, Outcome.FAILED, "MissingTerminalReport",
             "the driver exited 0 but the trainer left no terminal report with an artifact",
             report)
        return
    disposition = classify_exit(end.exit_code)
    message = f"{disposition.message}: {end.message}".strip(": ")
    # A driver stopped without a suspension being asked for (its pod deleted, its node
    # drained) checkpointed and exited SUSPENDED: for the run that is an interruption.
    interrupted = end.exit_code == ExitCode.SUSPENDED
    if not (disposition.retryable or interrupted):
        _end(d, o, Outcome.FAILED, str(disposition.reason), message, report)
        return
    s = d.status
    if s.recovery.restarts >= o.spec.run_policy.max_restarts:
        _end(d, o, Outcome.FAILED, str(Reason.MAX_RESTARTS_EXCEEDED),
             f"{message}; no restarts left (runPolicy.maxRestarts={s.recovery.max_restarts})",
             report)
        return
    s.recovery.restarts += 1
    reason = "Interrupted" if interrupted else str(disposition.reason)
    _start_attempt(d, o, s.recovery.attempt + 1, reason)
    _condition(d, o, ConditionType.RECOVERING, True, reason,
               f"attempt {s.recovery.attempt} resumes from the latest checkpoint: {message}")
    _condition(d, o, ConditionType.RUNNING, False, reason, message)
    _phase(d, o, Phase.RECOVERING, f"attempt {s.recovery.attempt} after: {message}")
    d.actions.append(Action.ENSURE_RUN_CHILDREN)  # the run config of the new attempt
    d.requeue_after = FAST_REQUEUE_SECONDS


def decide(o: Observed) -> Decision:
    d = Decision(status=o.status.model_copy(deep=True))
    s = d.status
    s.observed_generation = o.generation
    names = ChildNames(o.name)

    if s.phase is not None and s.phase.is_terminal:
        _cleanup(d, o)
        return d

    if s.phase in (None, Phase.PENDING):
        refusal = accept(o.spec, o.pvcs)
        if refusal is not None:
            _refuse(d, o, refusal)
            return d
        _condition(d, o, ConditionType.ACCEPTED, True, "Accepted",
                   "the plan fits the budget and the volumes fit the placement")
        _phase(d, o, Phase.ACCEPTED, "accepted")
        s.start_time = o.now
        s.ledger.planned_steps = o.spec.algorithm.max_steps
        s.children = Children(
            ray_cluster=names.ray_cluster, run_config_map=names.run_config_map,
            report_config_map=names.report_config_map, service_account=names.service_account,
            auth_secret=names.auth_secret,
        )
        _start_attempt(d, o, 1, "Started")

    health = cluster_health(o.ray_cluster, o.spec.resources.workers)
    _condition(d, o, ConditionType.CLUSTER_READY, health == ClusterHealth.HEALTHY, str(health))

    if o.spec.run_policy.cancel:
        if s.children.driver_job:
            d.actions.append(Action.DELETE_DRIVER_JOB)
        _end(d, o, Outcome.CANCELLED, str(Reason.CANCELLED), "runPolicy.cancel is set", None)
        return d

    if s.phase in (Phase.ACCEPTED, Phase.PROVISIONING, Phase.RECOVERING):
        d.actions.append(Action.ENSURE_RUN_CHILDREN)
        if health != ClusterHealth.HEALTHY:
            if s.phase != Phase.RECOVERING:
                _phase(d, o, Phase.PROVISIONING, "waiting for the RayCluster to be ready")
            d.requeue_after = FAST_REQUEUE_SECONDS
            return d
        if s.phase == Phase.RECOVERING:
            _condition(d, o, ConditionType.RECOVERING, False, "Resumed",
                       f"attempt {s.recovery.attempt} started")
        _phase(d, o, Phase.RUNNING, f"RayCluster ready; starting attempt {s.recovery.attempt}")
        _condition(d, o, ConditionType.RUNNING, True, "DriverStarted",
                   f"driver Job {s.children.driver_job}")
        d.actions.append(Action.ENSURE_DRIVER_JOB)
        d.requeue_after = FAST_REQUEUE_SECONDS
        return d

    # Running: mirror the trainer's report, and act on the driver's end.
    report, problem = read_report(o, s)
    if problem is not None:
        d.events.append(problem)
    if report is not None:
        _mirror(d, o, report)
    # A missing Job of the current attempt is (re)created under the same name: the operator
    # may have stopped between recording the attempt and creating it, and a new driver attaches
    # to the attempt's Ray job by its submission id instead of starting another.
    end = driver_end(o.driver_job, o.driver_pods) if o.driver_job is not None else None
    if end is None:
        d.actions.append(Action.ENSURE_DRIVER_JOB)
        d.requeue_after = FAST_REQUEUE_SECONDS if o.driver_job is None else STEADY_REQUEUE_SECONDS
        return d
    _finish_driver(d, o, end, report)
    return d


def _cleanup(d: Decision, o: Observed) -> None:
    s = d.status
    done = s.terminal is None or (s.terminal.cleanup and s.terminal.cleanup.ray_cluster_deleted)
    if done or s.children.ray_cluster is None:  # refused runs never had children
        d.requeue_after = None
        return
    if o.ray_cluster is not None:
        d.actions.append(Action.DELETE_RAY_CLUSTER)
        d.requeue_after = FAST_REQUEUE_SECONDS
        return
    # Written only once the RayCluster is observed gone.
    s.terminal.cleanup = Cleanup(ray_cluster_deleted=True, time=o.now)
    d.events.append(Event("Normal", "CleanedUp", "RayCluster deleted"))
    d.requeue_after = None
