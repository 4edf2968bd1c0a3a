"""One reconcile pass as a pure function: what was observed in, the new status and the
actions to take out. The controller performs the actions after writing the status, so intent
is recorded before acting and a retried pass finds what the last one made.

Phases: Pending → Accepted → [Queued →] Provisioning → Running → Succeeded | Failed, with
cleanup after the end.
- Running → Recovering → Running when the driver fails for a retryable cause, or the cluster
  is lost, and restarts remain; the warm RayCluster is kept unless it is the thing that failed.
- A stop (suspend, cancel, a deadline, the GPU budget) first asks the driver to checkpoint and
  exit, waits for it within a bound, then deletes the RayCluster: the run is Suspended (and
  resumes with a new attempt when suspend is cleared) or ends.
- Kueue holding the RayCluster (its spec.suspend) makes the run Queued, never Recovering.
- A `grpo.dev/retry` annotation with a new id reopens a Failed run with a new attempt.
- After the end and cleanup, ttlSecondsAfterFinished deletes the run.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from grpo_operator.acceptance import Confinement, Refusal, accept
from grpo_operator.api.constants import ANNOTATION_RETRY, ConditionType, Outcome, Phase, Reason
from grpo_operator.api.contract import UNVERSIONED, operator_refuses, peek_version
from grpo_operator.api.exit_codes import ExitCode, classify_exit
from grpo_operator.api.ray_job import driver_termination_grace_s
from grpo_operator.api.report import (
    MAX_SEQUENCE_STEP,
    Report,
    ReportError,
    TrainerState,
    is_stale,
    parse_report,
    signature_valid,
)
from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.api.status import (
    MAX_HISTORY,
    MAX_RETRY_ID_LENGTH,
    MAX_SEEN_RETRY_IDS,
    BudgetRemaining,
    Children,
    Cleanup,
    GRPORunStatus,
    RecoveryRecord,
    Stopping,
    Terminal,
    bounded,
)
from grpo_operator.conditions import set_condition, summarize
from grpo_operator.health import (
    ClusterHealth,
    DriverEnd,
    cluster_health,
    driver_end,
    exit_code,
    pod_problem,
    provisioned_at,
)
from grpo_operator.metering import gpu_seconds_since, pod_gpus, running_since
from grpo_operator.naming import ChildNames
from grpo_operator.progress import at_rest, shown_progress

# How soon to look again, by what the run waits for.
FAST_REQUEUE_SECONDS = 1.0
STEADY_REQUEUE_SECONDS = 5.0
# A RayCluster's changes (ready, gone) wake its run through the operator's RayCluster watch;
# this pass is the safety net.
RAY_CLUSTER_WAIT_SECONDS = STEADY_REQUEUE_SECONDS
# A run waiting for its cluster to come up or for its driver to end is woken by the watches of
# what it waits for (the RayCluster, its pods, the driver Job and its pods, the report
# ConfigMap); it is due on its own only for what time alone changes (a deadline, GPU metering,
# the bound on a ready cluster's unready spell: ``_next_due``) and, as a safety net, after
# this long. A pass every few seconds instead costs the operator's CPU in proportion to how
# long runs wait, which grows with how many wait at once.
RESYNC_SECONDS = 60.0

# Stops that end the run, by reason, with their outcome; a suspension is the only other stop.
_ENDING_STOPS = {
    Reason.CANCELLED: Outcome.CANCELLED,
    Reason.DEADLINE_EXCEEDED: Outcome.FAILED,
    Reason.PRE_RUNNING_DEADLINE_EXCEEDED: Outcome.FAILED,
    Reason.BUDGET_EXHAUSTED: Outcome.FAILED,
}


@dataclass(frozen=True)
class Policy:
    """Operator-wide bounds (``settings`` reads them from the environment)."""

    cluster_unhealthy_seconds: float = 300.0
    """How long a RayCluster that was ready may stay unready before it is recreated."""
    meter_interval_seconds: float = 30.0
    """How often, at least, a status write is made only to bring GPU-seconds up to date while
    GPU pods run (every status write a pass makes anyway brings them up to date too)."""
    meter_writes_per_second: float = 5.0
    """Those writes, operator-wide: with many runs metering at once each one's interval
    stretches to keep under this (0: no bound)."""
    stop_slack_seconds: float = 30.0
    """Added to the driver's grace period when waiting for the trainer's checkpoint."""
    confinement: Confinement = field(default_factory=Confinement)
    """What runs may reach (host directories, Secrets), judged at acceptance."""


class Action(StrEnum):
    # The identity, the Ray auth Secret, the run config, the NetworkPolicy, the RayCluster.
    ENSURE_RUN_CHILDREN = "EnsureRunChildren"
    # The driver's grant, report key and report ConfigMap, then its Job.
    ENSURE_DRIVER_JOB = "EnsureDriverJob"
    DELETE_RAY_CLUSTER = "DeleteRayCluster"
    DELETE_RUN = "DeleteRun"  # ttlSecondsAfterFinished


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
    created: datetime.datetime | None = None
    annotations: dict[str, str] = field(default_factory=dict)
    pvcs: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    config_maps: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    """A python reward's ConfigMap by name (None: missing), read while the run is judged."""
    ray_cluster: dict[str, Any] | None = None
    driver_job: dict[str, Any] | None = None
    driver_pods: list[dict[str, Any]] = field(default_factory=list)
    report_data: str | None = None
    report_map_missing: bool = False
    """The report ConfigMap was looked for and is gone (deleted mid-run)."""
    report_signature: str | None = None
    report_key: bytes = b""
    """The run's report key: a report counts only if signed with it (``api.report``)."""
    cluster_pods: list[dict[str, Any]] | None = None
    """The RayCluster's pods (None: there is no RayCluster)."""
    kueue_workload: dict[str, Any] | None = None
    """Kueue's Workload of the RayCluster, read while Kueue holds it (None: not read, none)."""
    metering_runs: int = 0
    """Runs the operator may meter now, counted as its RayClusters (a CPU run's too: the bound
    errs toward fewer writes): their metering writes share ``Policy.meter_writes_per_second``."""
    policy: Policy = field(default_factory=Policy)


@dataclass
class Decision:
    status: GRPORunStatus
    actions: list[Action] = field(default_factory=list)
    delete_jobs: list[str] = field(default_factory=list)
    """Driver Jobs to delete (their pods get SIGTERM: the trainer checkpoints)."""
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


def _seconds(later: datetime.datetime, earlier: datetime.datetime) -> float:
    return (later - earlier).total_seconds()


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
    d.requeue_after = RAY_CLUSTER_WAIT_SECONDS


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
    """The newest acceptable report of the current attempt, or why the stored one is not (an
    IncompatibleTrainer Event: the run cannot go on with this image)."""
    if not o.report_data:
        return None, None
    if not signature_valid(o.report_key, o.report_data, o.report_signature):
        return None, _rejected("unsigned report ignored" if not o.report_signature else
                               "report with a bad signature ignored (not written by this "
                               "run's driver)")
    try:
        refusal = operator_refuses(peek_version(o.report_data))
    except ValueError as e:
        return None, _rejected(f"invalid report ignored: {e}")
    if refusal is not None:
        return None, Event("Warning", str(Reason.INCOMPATIBLE_TRAINER), refusal)
    try:
        report = parse_report(o.report_data)
    except ReportError as e:
        return None, _rejected(f"invalid report ignored: {e}")
    if report.attempt != status.recovery.attempt:
        return None, _rejected(f"report of attempt {report.attempt} ignored during attempt "
                               f"{status.recovery.attempt}")
    cursor = status.accepted_report
    if cursor is not None and report.cursor == cursor:
        return report, None  # already mirrored
    if is_stale(report, cursor):
        return None, _rejected(f"stale report ignored (attempt {report.attempt}, sequence "
                               f"{report.sequence}; already at sequence {cursor.sequence})")
    base = cursor.sequence if cursor is not None and cursor.attempt == report.attempt else 0
    if report.sequence - base > MAX_SEQUENCE_STEP:
        return None, _rejected(f"report ignored: sequence {report.sequence} jumps more than "
                               f"{MAX_SEQUENCE_STEP} past {base}")
    return report, None


def _rejected(message: str) -> Event:
    return Event("Warning", str(Reason.REPORT_REJECTED), message)


def _mirror(d: Decision, o: Observed, report: Report) -> None:
    s = d.status
    for name in type(report.ledger).model_fields:
        setattr(s.ledger, name, getattr(report.ledger, name))
    s.ledger.last_report_time = report.time
    s.trainer_contract_version = report.contract_version or str(UNVERSIONED)
    s.recovery.resumed_from_step = report.recovery.resumed_from_step
    s.recovery.last_checkpoint = report.recovery.last_checkpoint
    s.recovery.rollout = report.recovery.rollout
    # The first digests win: a later attempt is checked against them, never the reverse.
    s.recovery.inputs = s.recovery.inputs or report.recovery.inputs
    s.progress = shown_progress(report, s.ledger)
    s.accepted_report = report.cursor
    _budget_remaining(d, o)


def _read_and_mirror(d: Decision, o: Observed) -> Report | None:
    """The current report, mirrored; an image the operator cannot work with ends the run
    (callers return once the phase is terminal)."""
    report, problem = read_report(o, d.status)
    if problem is not None and problem.reason == Reason.INCOMPATIBLE_TRAINER:
        d.events.append(problem)
        d.delete_jobs.append(d.status.children.driver_job)
        _end(d, o, Outcome.FAILED, problem.reason, problem.message, None)
        return None
    if problem is not None:
        d.events.append(problem)
    if report is not None:
        _mirror(d, o, report)
    return report


def _budget_remaining(d: Decision, o: Observed) -> None:
    budget, ledger = o.spec.budget, d.status.ledger
    if budget.max_generated_tokens is None and budget.max_gpu_hours is None:
        return
    ledger.budget_remaining = BudgetRemaining(
        generated_tokens=None if budget.max_generated_tokens is None
        else budget.max_generated_tokens - ledger.budget_tokens,
        gpu_hours=None if budget.max_gpu_hours is None
        else round(budget.max_gpu_hours - ledger.gpu_seconds / 3600, 6),
    )


def meter_interval(o: Observed) -> float:
    """Seconds between metering writes of one run: the policy's interval, stretched so that
    all the runs metering at once make at most ``meter_writes_per_second`` of them. Runs wait
    longer the more there are (KubeRay readies clusters one at a time), so a fixed interval
    would cost each run more writes the more runs there are."""
    rate = o.policy.meter_writes_per_second
    return max(o.policy.meter_interval_seconds, o.metering_runs / rate if rate else 0.0)


def _unmetered(o: Observed, s: GRPORunStatus) -> float:
    """GPU-seconds the cluster's running pods used since the last metering."""
    if not o.cluster_pods or not o.spec.resources.gpus_per_worker:
        return 0.0
    return gpu_seconds_since(o.cluster_pods, o.spec.resources.gpu_resource_name,
                             s.ledger.gpu_metered_time, o.now)


def _meter_gpus(d: Decision, o: Observed, *, writing: bool = False) -> None:
    """Add the GPU pods' Running time since the last metering, when due: the pass writes the
    status anyway (``writing``), a stop is under way, the GPU budget is used up by now, or
    ``meter_interval`` has passed. When no GPU pod runs the metering time is left alone: a
    pod that starts later counts from its own start."""
    s = d.status
    ledger, budget = s.ledger, o.spec.budget.max_gpu_hours
    added = _unmetered(o, s)
    if added <= 0:
        return
    since = ledger.gpu_metered_time or s.start_time or o.now
    if (writing or s.stopping is not None
            or (budget is not None and ledger.gpu_seconds + added >= budget * 3600)
            or _seconds(o.now, since) >= meter_interval(o)):
        ledger.gpu_seconds = round(ledger.gpu_seconds + added, 3)
        ledger.gpu_metered_time = o.now
        _budget_remaining(d, o)


def _start_attempt(d: Decision, o: Observed, attempt: int, reason: str) -> None:
    s = d.status
    s.recovery.attempt = attempt
    s.recovery.max_restarts = o.spec.run_policy.max_restarts
    checkpoint = s.recovery.last_checkpoint
    s.recovery.history = bounded(
        s.recovery.history,
        RecoveryRecord(attempt=attempt, reason=reason, time=o.now,
                       from_step=checkpoint.step if checkpoint else 0),
        MAX_HISTORY,
    )
    s.children.driver_job = ChildNames(o.name).driver_job(attempt)
    s.progress = None  # the last attempt's; the new one reports its own


def _restart(d: Decision, o: Observed, reason: str, message: str,
             report: Report | None, *, counted: bool = True) -> None:
    """A failure the next attempt may get past: start it, or fail if no restart is left.
    An interruption the cluster caused (``counted`` False) starts the next attempt free."""
    s = d.status
    if counted and s.recovery.restarts >= o.spec.run_policy.max_restarts:
        _end(d, o, Outcome.FAILED, str(Reason.MAX_RESTARTS_EXCEEDED),
             f"{message}; no restarts left (runPolicy.maxRestarts="
             f"{o.spec.run_policy.max_restarts})", report)
        return
    if counted:
        s.recovery.restarts += 1
    _start_attempt(d, o, s.recovery.attempt + 1, reason)
    _condition(d, o, ConditionType.RECOVERING, True, reason,
               f"attempt {s.recovery.attempt} resumes from the latest checkpoint: {message}")
    _condition(d, o, ConditionType.RUNNING, False, reason, message)
    _phase(d, o, Phase.RECOVERING, f"attempt {s.recovery.attempt} after: {message}")
    d.actions.append(Action.ENSURE_RUN_CHILDREN)  # the run config of the new attempt
    d.requeue_after = FAST_REQUEUE_SECONDS


def _finish_driver(d: Decision, o: Observed, end: DriverEnd, report: Report | None) -> None:
    terminal = report.terminal if report else None
    if terminal and terminal.outcome == Outcome.SUCCEEDED:
        if end.succeeded:
            _end(d, o, Outcome.SUCCEEDED, terminal.reason,
                 terminal.message or "training finished", report)
            return
        # Success takes both: the report and the driver's exit 0, which only the Job
        # controller and the kubelet can state.
        d.events.append(_rejected(f"terminal report of attempt {report.attempt} says "
                                  f"Succeeded but the driver did not exit 0 ({end.message})"))
        terminal = None
    if terminal is not None:  # the trainer's own account of a failure is the authority
        _end(d, o, terminal.outcome, terminal.reason, terminal.message, report)
        return
    if end.succeeded:
        _end(d, o, Outcome.FAILED, "MissingTerminalReport",
             "the driver exited 0 but the trainer left no terminal report with an artifact",
             report)
        return
    disposition = classify_exit(end.exit_code)
    message = f"{disposition.message}: {end.message}".strip(": ")
    # A driver stopped without a stop being asked for (its pod deleted, its node drained)
    # checkpointed and exited SUSPENDED: for the run that is an interruption.
    interrupted = end.exit_code == ExitCode.SUSPENDED
    if not (disposition.retryable or interrupted):
        _end(d, o, Outcome.FAILED, str(disposition.reason), message, report)
        return
    # The trainer may say why (with the figures); the exit code alone decides what happens, so
    # a report's failure only counts when it names the reason the exit code means.
    failure = report.failure if report else None
    if failure is not None and failure.reason == disposition.reason:
        message = f"{failure.message} ({disposition.message})"
        d.events.append(Event("Warning", failure.reason, message))
    # The cluster took the pod away (a drain's eviction, preemption, a tainted node): as Job
    # podFailurePolicy's DisruptionTarget rules do, that is not the run's failure.
    if end.disruption is not None and (interrupted or end.exit_code is None):
        _restart(d, o, str(Reason.DISRUPTED), f"the driver pod was disrupted: {end.disruption}",
                 report, counted=False)
        return
    _restart(d, o, "Interrupted" if interrupted else str(disposition.reason), message, report)


# --- The clocks and stops -------------------------------------------------------------------

def _over(since: datetime.datetime | None, limit: int | None, now: datetime.datetime) -> bool:
    return since is not None and limit is not None and _seconds(now, since) > limit


def _stop_wanted(o: Observed, s: GRPORunStatus) -> tuple[Reason, str] | None:
    """The stop the spec, the clocks or the budget ask for, the most final first."""
    budget, policy = o.spec.budget, o.spec.run_policy
    if policy.cancel:
        return Reason.CANCELLED, "runPolicy.cancel is set"
    if s.phase == Phase.SUSPENDED:
        return None  # the clocks stand still and nothing is spent while suspended
    if _over(s.active_since, budget.active_deadline_seconds, o.now):
        return (Reason.DEADLINE_EXCEEDED,
                f"budget.activeDeadlineSeconds={budget.active_deadline_seconds} passed")
    if s.active_since is None and _over(s.pre_running_since,
                                        budget.pre_running_deadline_seconds, o.now):
        return (Reason.PRE_RUNNING_DEADLINE_EXCEEDED,
                f"the RayCluster was not ready within budget.preRunningDeadlineSeconds="
                f"{budget.pre_running_deadline_seconds}")
    if budget.max_gpu_hours is not None and s.ledger.gpu_seconds >= budget.max_gpu_hours * 3600:
        return (Reason.BUDGET_EXHAUSTED,
                f"{s.ledger.gpu_seconds / 3600:.4g} GPU-hours used of budget.maxGPUHours="
                f"{budget.max_gpu_hours}")
    if policy.suspend:
        return Reason.SUSPENDED, "runPolicy.suspend is set"
    return None


def _next_check(o: Observed, s: GRPORunStatus) -> float | None:
    """Seconds until a deadline passes (None: no deadline is running)."""
    budget = o.spec.budget
    clocks = [(s.active_since, budget.active_deadline_seconds)]
    if s.active_since is None:
        clocks.append((s.pre_running_since, budget.pre_running_deadline_seconds))
    left = [limit - _seconds(o.now, since) + 1 for since, limit in clocks
            if since is not None and limit is not None]
    return max(min(left), FAST_REQUEUE_SECONDS) if left else None


def _stop(d: Decision, o: Observed) -> None:
    """Drive a stop on: the trainer's checkpoint first, then the RayCluster, then the end."""
    s = d.status
    stopping = s.stopping
    report = _read_and_mirror(d, o)
    if s.phase.is_terminal:
        return
    settled = report is not None and report.state in (TrainerState.SUSPENDED,
                                                       TrainerState.FINISHED)
    driver_there = o.driver_job is not None or bool(o.driver_pods)
    grace = (driver_termination_grace_s(o.spec.resources.termination_grace_period_seconds)
             + o.policy.stop_slack_seconds)
    if driver_there and not settled and _seconds(o.now, stopping.time) < grace:
        if o.driver_job is not None and not o.driver_job["metadata"].get("deletionTimestamp"):
            d.delete_jobs.append(o.driver_job["metadata"]["name"])
        d.requeue_after = FAST_REQUEUE_SECONDS
        return
    if report is not None and report.terminal is not None:
        # The trainer finished first: its account stands, a success only with the driver's
        # exit 0 (from the Job, or from its pod once the stop deleted the Job).
        end = driver_end(o.driver_job, o.driver_pods) if o.driver_job is not None else None
        code = end.exit_code if end is not None else exit_code(o.driver_pods)
        if report.terminal.outcome != Outcome.SUCCEEDED or code == 0:
            s.stopping = None
            _finish_driver(d, o, DriverEnd(code == 0, code, ""), report)
            return
    outcome = _ENDING_STOPS.get(stopping.reason)
    if outcome is not None:
        s.stopping = None
        _end(d, o, outcome, stopping.reason, stopping.message, report)
        return
    # A suspension: the RayCluster goes, the run waits for runPolicy.suspend to be cleared.
    _condition(d, o, ConditionType.RUNNING, False, str(Reason.SUSPENDED), stopping.message)
    if o.ray_cluster is not None:
        d.actions.append(Action.DELETE_RAY_CLUSTER)
        d.requeue_after = RAY_CLUSTER_WAIT_SECONDS
        return
    s.stopping = None
    checkpoint = s.recovery.last_checkpoint
    at = f"checkpoint step {checkpoint.step}" if checkpoint else "no checkpoint yet"
    _condition(d, o, ConditionType.SUSPENDED, True, str(Reason.SUSPENDED),
               f"{stopping.message}; RayCluster deleted; {at}")
    _phase(d, o, Phase.SUSPENDED, f"suspended ({at})")
    d.requeue_after = None


def _resume(d: Decision, o: Observed) -> None:
    """Suspend was cleared: the clocks move on by the time suspended, a new attempt resumes
    from the checkpoint on a new RayCluster."""
    s = d.status
    suspended = s.condition(ConditionType.SUSPENDED)
    paused = datetime.timedelta(
        seconds=_seconds(o.now, suspended.last_transition_time) if suspended else 0)
    if s.active_since is not None:
        s.active_since += paused
    if s.pre_running_since is not None:
        s.pre_running_since += paused
    _start_attempt(d, o, s.recovery.attempt + 1, str(Reason.RESUMED))
    _condition(d, o, ConditionType.SUSPENDED, False, str(Reason.RESUMED),
               f"attempt {s.recovery.attempt} resumes from the latest checkpoint")
    _phase(d, o, Phase.PROVISIONING, f"resuming with attempt {s.recovery.attempt}")


# --- Retry and the end ----------------------------------------------------------------------

def _retry_id(d: Decision, o: Observed) -> str | None:
    """A retry id not seen before (recorded now), or None."""
    # Compared as recorded (cut to 253 characters), or a longer id would never look seen
    # and would reopen the run on every pass.
    wanted = (o.annotations.get(ANNOTATION_RETRY) or "").strip()[:MAX_RETRY_ID_LENGTH]
    if not wanted or wanted in d.status.seen_retry_ids:
        return None
    d.status.seen_retry_ids = bounded(d.status.seen_retry_ids, wanted, MAX_SEEN_RETRY_IDS)
    return wanted


def _reopen(d: Decision, o: Observed, retry_id: str) -> None:
    """A Failed run gets a new attempt (a refused one is judged again from the start)."""
    s = d.status
    ended = s.completion_time or o.now
    if s.active_since is not None:
        s.active_since += o.now - ended  # time spent Failed is not the run's
    message = f"grpo.dev/retry={retry_id}: {s.terminal.reason if s.terminal else ''}"
    s.terminal = None
    s.completion_time = None
    for ended in (ConditionType.FAILED, ConditionType.STALLED):
        _condition(d, o, ended, False, str(Reason.RETRY), message)
    d.events.append(Event("Normal", str(Reason.RETRY), message))
    if s.children.ray_cluster is None:  # refused at acceptance: nothing was ever made
        s.phase = Phase.PENDING
        return
    s.recovery.restarts = 0
    _start_attempt(d, o, s.recovery.attempt + 1, str(Reason.RETRY))
    _condition(d, o, ConditionType.RECOVERING, True, str(Reason.RETRY), message)
    _phase(d, o, Phase.RECOVERING, f"attempt {s.recovery.attempt} after {message}")


def _after_end(d: Decision, o: Observed) -> None:
    """Cleanup receipt once the RayCluster is gone, then the TTL."""
    s = d.status
    d.requeue_after = None
    if s.terminal is not None and s.terminal.cleanup is None and s.children.ray_cluster:
        if o.ray_cluster is not None:
            d.actions.append(Action.DELETE_RAY_CLUSTER)
            d.requeue_after = RAY_CLUSTER_WAIT_SECONDS
            return
        # Written only once the RayCluster is observed gone.
        s.terminal.cleanup = Cleanup(ray_cluster_deleted=True, time=o.now)
        d.events.append(Event("Normal", "CleanedUp", "RayCluster deleted"))
    ttl = o.spec.run_policy.ttl_seconds_after_finished
    if ttl is None or s.completion_time is None:
        return
    left = ttl - _seconds(o.now, s.completion_time)
    if left <= 0:
        d.actions.append(Action.DELETE_RUN)
    else:
        d.requeue_after = left


# --- The pass -------------------------------------------------------------------------------

def _accept(d: Decision, o: Observed) -> bool:
    s = d.status
    refusal = accept(o.spec, o.pvcs, o.policy.confinement, o.config_maps)
    if refusal is not None:
        _refuse(d, o, refusal)
        return False
    _condition(d, o, ConditionType.ACCEPTED, True, "Accepted",
               "the plan fits the budget and the volumes fit the placement")
    _phase(d, o, Phase.ACCEPTED, "accepted")
    s.start_time = o.now
    if not o.spec.run_policy.queue_name:
        s.pre_running_since = o.created or o.now
    s.ledger.planned_steps = o.spec.algorithm.max_steps
    names = ChildNames(o.name)
    s.children = Children(
        ray_cluster=names.ray_cluster, run_config_map=names.run_config_map,
        report_config_map=names.report_config_map, service_account=names.service_account,
        auth_secret=names.auth_secret,
    )
    _start_attempt(d, o, s.recovery.attempt + 1, "Started")
    return True


def held_by_kueue(spec: GRPORunSpec, ray_cluster: dict[str, Any] | None) -> bool:
    """The run is queued and Kueue holds its RayCluster (its ``spec.suspend``)."""
    return (bool(spec.run_policy.queue_name) and ray_cluster is not None
            and (ray_cluster.get("spec") or {}).get("suspend") is True)


def _queue(d: Decision, o: Observed) -> None:
    """Kueue holds the RayCluster: the run waits in its queue. A running attempt was
    preempted; the next one starts when Kueue admits the cluster again (not a restart)."""
    s = d.status
    if s.phase == Phase.RUNNING:
        d.delete_jobs.append(s.children.driver_job)
        _start_attempt(d, o, s.recovery.attempt + 1, str(Reason.PREEMPTED))
        _condition(d, o, ConditionType.RUNNING, False, str(Reason.PREEMPTED),
                   "Kueue suspended the RayCluster")
    waiting = f"waiting for Kueue to admit the RayCluster (queue {o.spec.run_policy.queue_name})"
    _phase(d, o, Phase.QUEUED, waiting)
    verdict = kueue_verdict(o.kueue_workload)
    _condition(d, o, ConditionType.CLUSTER_READY, False, str(Phase.QUEUED),
               f"{waiting}: {verdict}" if verdict else waiting)
    d.actions.append(Action.ENSURE_RUN_CHILDREN)


KUEUE_MESSAGE_LIMIT = 300
"""Characters of Kueue's message kept in the run's status (the Workload has it whole)."""


def kueue_verdict(workload: dict[str, Any] | None) -> str | None:
    """Why Kueue holds the RayCluster, in Kueue's words: its Workload's QuotaReserved=False
    message (no quota yet: which resource is short), else an Evicted=True one (preempted)."""
    conditions = {c.get("type"): c for c in
                  ((workload or {}).get("status") or {}).get("conditions") or []}
    for kind, held in (("QuotaReserved", "False"), ("Evicted", "True")):
        condition = conditions.get(kind) or {}
        message = str(condition.get("message") or "").strip()
        if condition.get("status") == held and message:
            return message[:KUEUE_MESSAGE_LIMIT]
    return None


def _cluster_lost(o: Observed, s: GRPORunStatus, health: ClusterHealth) -> bool:
    """The RayCluster of a running attempt is gone, or a cluster that was ready has been
    unready for longer than the bound. One never ready yet is waited for (deadlines bound
    that wait), and so is one being deleted while recovering (it is made again once gone)."""
    if health == ClusterHealth.HEALTHY:
        return False
    if health in (ClusterHealth.ABSENT, ClusterHealth.DELETING):
        return s.phase == Phase.RUNNING
    unready_since = _unready_since(o, s)
    return (unready_since is not None
            and _seconds(o.now, unready_since) > o.policy.cluster_unhealthy_seconds)


def _unready_since(o: Observed, s: GRPORunStatus) -> datetime.datetime | None:
    """Since when a cluster that was ready has been unready (None: it is ready, or was never
    ready: deadlines bound that wait)."""
    ready = s.condition(ConditionType.CLUSTER_READY)
    provisioned = provisioned_at(o.ray_cluster)
    if ready is None or ready.status == "True" or provisioned is None:
        return None
    # Unready since we saw it so, or since it was first ready if that came later (a pass
    # may miss a short ready spell of this cluster after an earlier one went unready).
    return max(ready.last_transition_time, provisioned)


def _next_due(o: Observed, s: GRPORunStatus) -> float:
    """Seconds until a waiting run's next pass that no watch event would bring: a deadline,
    GPU metering while a GPU pod runs, the end of a ready cluster's allowed unready spell, or
    the safety net (each clock's first pass past it: ``now`` has whole seconds)."""
    due = [RESYNC_SECONDS, _next_check(o, s)]
    resource = o.spec.resources.gpu_resource_name
    gpus = sum(pod_gpus(p, resource) for p in o.cluster_pods or () if running_since(p))
    if o.spec.resources.gpus_per_worker and gpus:
        metered = s.ledger.gpu_metered_time or s.start_time or o.now
        due.append(meter_interval(o) - _seconds(o.now, metered) + 1)
        budget = o.spec.budget.max_gpu_hours
        if budget is not None:  # when the running pods will have used it up
            due.append((budget * 3600 - s.ledger.gpu_seconds - _unmetered(o, s)) / gpus + 1)
    unready_since = _unready_since(o, s)
    if unready_since is not None:
        due.append(o.policy.cluster_unhealthy_seconds - _seconds(o.now, unready_since) + 1)
    return max(min(d for d in due if d is not None), FAST_REQUEUE_SECONDS)


def _replace_cluster(d: Decision, why: str) -> None:
    """Delete a lost RayCluster; the next attempt's pass creates it anew once it is gone."""
    d.actions.append(Action.DELETE_RAY_CLUSTER)
    d.events.append(Event("Warning", str(Reason.CLUSTER_UNHEALTHY),
                          f"RayCluster {why}: recreating it"))


def decide(o: Observed) -> Decision:
    """What to write and do for the run as observed."""
    d = _decide(o)
    if d.status.phase != Phase.RUNNING:
        d.status.progress = at_rest(d.status.progress)
    summarize(d.status, generation=o.generation, now=o.now)
    if d.status != o.status:  # written anyway: GPU-seconds go with it, at no extra request
        _meter_gpus(d, o, writing=True)
    return d


def _decide(o: Observed) -> Decision:
    d = Decision(status=o.status.model_copy(deep=True))
    s = d.status
    s.observed_generation = o.generation
    _meter_gpus(d, o)
    retry_id = _retry_id(d, o)

    if s.phase is not None and s.phase.is_terminal:
        if not (retry_id and s.phase == Phase.FAILED):
            _after_end(d, o)
            return d
        _reopen(d, o, retry_id)

    if s.phase in (None, Phase.PENDING) and not _accept(d, o):
        return d

    ray_pods = o.cluster_pods or []
    health = cluster_health(o.ray_cluster, o.spec.resources.workers, ray_pods)
    stuck = pod_problem(ray_pods) if health != ClusterHealth.HEALTHY else None
    _condition(d, o, ConditionType.CLUSTER_READY, health == ClusterHealth.HEALTHY, str(health),
               stuck or "")
    if stuck:
        d.events.append(Event("Warning", str(Reason.POD_NOT_STARTING), stuck))

    wanted = _stop_wanted(o, s)
    if wanted is not None:
        reason, message = wanted
        current = s.stopping
        if current is None or (reason in _ENDING_STOPS and current.reason not in _ENDING_STOPS):
            s.stopping = Stopping(reason=reason, message=message, time=o.now)
            d.events.append(Event("Normal", "Stopping",
                                  f"{message}: stopping the trainer with a checkpoint"))
    if s.stopping is not None:
        _stop(d, o)
        return d

    if s.phase == Phase.SUSPENDED:
        if o.spec.run_policy.suspend:
            d.requeue_after = None
            return d
        _resume(d, o)

    if held_by_kueue(o.spec, o.ray_cluster):
        _queue(d, o)
        return d
    if s.pre_running_since is None and s.active_since is None and o.ray_cluster is not None:
        s.pre_running_since = o.now  # Kueue admitted the RayCluster

    if s.phase in (Phase.ACCEPTED, Phase.QUEUED, Phase.PROVISIONING, Phase.RECOVERING):
        d.actions.append(Action.ENSURE_RUN_CHILDREN)
        if health == ClusterHealth.ABSENT:
            # This pass makes it: the condition says what the pass leaves, as the phase does
            # (not Absent now and Provisioning at the next pass, a status write each).
            _condition(d, o, ConditionType.CLUSTER_READY, False, str(ClusterHealth.PROVISIONING))
        if health != ClusterHealth.HEALTHY:
            if s.phase == Phase.RECOVERING and _cluster_lost(o, s, health):
                _replace_cluster(d, "unready for too long")
            if s.phase != Phase.RECOVERING:
                _phase(d, o, Phase.PROVISIONING, "waiting for the RayCluster to be ready")
            d.requeue_after = _next_due(o, s)
            return d
        if s.active_since is None:
            s.active_since = o.now
        if s.phase == Phase.RECOVERING:
            _condition(d, o, ConditionType.RECOVERING, False, "Resumed",
                       f"attempt {s.recovery.attempt} started")
        _phase(d, o, Phase.RUNNING, f"RayCluster ready; starting attempt {s.recovery.attempt}")
        _condition(d, o, ConditionType.RUNNING, True, "DriverStarted",
                   f"driver Job {s.children.driver_job}")
        d.actions.append(Action.ENSURE_DRIVER_JOB)
        d.requeue_after = FAST_REQUEUE_SECONDS
        return d

    # Running: mirror the trainer's report, and act on the driver's end or a lost cluster.
    if o.report_map_missing:  # made again, or the driver's reports have nowhere to go
        d.actions.append(Action.ENSURE_DRIVER_JOB)
        d.events.append(Event("Warning", "ChildMissing",
                              "the report ConfigMap was deleted: making it again"))
    report = _read_and_mirror(d, o)
    if s.phase.is_terminal:
        return d
    if _cluster_lost(o, s, health):
        d.delete_jobs.append(s.children.driver_job)
        if o.ray_cluster is not None:
            _replace_cluster(d, "being deleted" if health == ClusterHealth.DELETING
                             else "unready for too long")
        _restart(d, o, str(Reason.CLUSTER_UNHEALTHY),
                 f"the RayCluster is {str(health).lower()}", report)
        return d
    # A missing Job of the current attempt is (re)created under the same name: the operator
    # may have stopped between recording the attempt and creating it, and a new driver attaches
    # to the attempt's Ray job by its submission id instead of starting another.
    end = driver_end(o.driver_job, o.driver_pods) if o.driver_job is not None else None
    if end is None:
        stuck = pod_problem(o.driver_pods)
        _condition(d, o, ConditionType.RUNNING, True, "DriverStarted",
                   f"driver Job {s.children.driver_job}" + (f"; {stuck}" if stuck else ""))
        if stuck:
            d.events.append(Event("Warning", str(Reason.POD_NOT_STARTING), stuck))
        d.actions.append(Action.ENSURE_DRIVER_JOB)
        d.requeue_after = (FAST_REQUEUE_SECONDS if o.driver_job is None
                           else _next_due(o, s))
        return d
    _finish_driver(d, o, end, report)
    return d
