"""Stops (cancel, suspend, deadlines, GPU budget), Kueue, lost clusters, GPU metering, retry
and TTL in the pure phase machine."""

from __future__ import annotations

import datetime

import pytest

from grpo_operator.api.ray_job import driver_termination_grace_s
from grpo_operator.api.report import Report, TrainerState
from grpo_operator.api.status import CheckpointRef, GRPORunStatus, TrainerLedger, TrainerRecovery
from grpo_operator.reconcile import (
    RESYNC_SECONDS,
    Action,
    Observed,
    Policy,
    decide,
    kueue_verdict,
)
from tests.operator.test_reconcile import (
    HEALTHY,
    HEALTHY_RC,
    HOST_PATHS,
    NOW,
    RUNNING_JOB,
    SPEC,
    _job,
    _pod,
    finished,
    ray_pod,
    report,
    running_status,
    signed,
)

SECOND = datetime.timedelta(seconds=1)


def spec(**sections):
    """SPEC with fields of its sections replaced, e.g. run_policy={"suspend": True}."""
    update = {name: getattr(SPEC, name).model_copy(update=fields)
              for name, fields in sections.items()}
    return SPEC.model_copy(update=update)


def at(status: GRPORunStatus, seconds: float = 0, spec_=SPEC, **kw) -> Observed:
    return Observed(name="r", generation=1, spec=spec_, status=status,
                    now=NOW + seconds * SECOND, **signed({"policy": HOST_PATHS, **kw}))


def suspended_report(sequence: int = 5, attempt: int = 1) -> str:
    checkpoint = CheckpointRef(step=2, path="/checkpoints/u/step_2", sha256="b" * 64, time=NOW)
    return Report(schema_version=1, attempt=attempt, sequence=sequence, time=NOW,
                  state=TrainerState.SUSPENDED,
                  ledger=TrainerLedger(planned_steps=3, completed_steps=2, generated_tokens=80),
                  recovery=TrainerRecovery(last_checkpoint=checkpoint)).to_json()


def _stamp(seconds: float) -> str:
    return (NOW + seconds * SECOND).isoformat().replace("+00:00", "Z")


def rc_created(seconds: float, provisioned: float | None = None) -> dict:
    """An unready RayCluster; ``provisioned``: when its pods were all first ready (KubeRay)."""
    conditions = [{"type": "HeadPodReady", "status": "False"}]
    if provisioned is not None:
        conditions.append({"type": "RayClusterProvisioned", "status": "True",
                           "lastTransitionTime": _stamp(provisioned)})
    return {"metadata": {"name": "r", "creationTimestamp": _stamp(seconds)},
            "status": {"conditions": conditions}}


# --- Stops ------------------------------------------------------------------------------------

def test_cancel_stops_the_driver_with_a_checkpoint_then_ends_keeping_the_ledger():
    cancel = spec(run_policy={"cancel": True})
    status = decide(at(running_status(), **HEALTHY, driver_job=RUNNING_JOB,
                       report_data=report(3, steps=1))).status
    asking = decide(at(status, 1, cancel, **HEALTHY, driver_job=RUNNING_JOB,
                       report_data=report(3, steps=1)))
    assert asking.status.stopping.reason == "Cancelled"
    assert asking.delete_jobs == ["r-a1"] and Action.DELETE_RAY_CLUSTER not in asking.actions
    assert asking.status.phase == "Running"
    # The driver is going (its Job deleted, the pod still finishing): wait for the checkpoint.
    waiting = decide(at(asking.status, 2, cancel, **HEALTHY,
                        driver_pods=[{"status": {"phase": "Running"}}],
                        report_data=report(3, steps=1)))
    assert waiting.status.phase == "Running" and waiting.delete_jobs == []
    done = decide(at(waiting.status, 3, cancel, **HEALTHY,
                     report_data=suspended_report()))
    s = done.status
    assert s.phase == "Cancelled" and s.terminal.reason == "Cancelled"
    assert s.stopping is None
    assert s.ledger.completed_steps == 2  # the ledger of the last report
    assert s.recovery.last_checkpoint.step == 2
    assert Action.DELETE_RAY_CLUSTER in done.actions


def test_a_stop_ends_succeeded_only_on_the_drivers_exit_0():
    """The trainer finished as the cancel came: its Succeeded report stands only with the
    driver's exit 0 (Job or pod); without it the run ends as the stop says."""
    cancel = spec(run_policy={"cancel": True})
    asking = decide(at(running_status(), 0, cancel, **HEALTHY,
                       driver_job=RUNNING_JOB)).status
    done = finished()
    from_pod = decide(at(asking, 2, cancel, **HEALTHY, driver_pods=[_pod(0)],
                         report_data=done))
    assert from_pod.status.phase == "Succeeded"
    from_job = decide(at(asking, 2, cancel, **HEALTHY,
                         driver_job=_job("Complete"), report_data=done))
    assert from_job.status.phase == "Succeeded"
    unconfirmed = decide(at(asking, 2, cancel, **HEALTHY, report_data=done))
    assert unconfirmed.status.phase == "Cancelled"
    crashed = decide(at(asking, 2, cancel, **HEALTHY, driver_pods=[_pod(1)],
                        report_data=done))
    assert crashed.status.phase == "Cancelled"


def test_a_stop_waits_no_longer_than_the_drivers_grace_period():
    cancel = spec(run_policy={"cancel": True})
    asking = decide(at(running_status(), 0, cancel, **HEALTHY,
                       driver_job=RUNNING_JOB))
    pods = [{"status": {"phase": "Running"}}]
    grace = (driver_termination_grace_s(SPEC.resources.termination_grace_period_seconds)
             + Policy().stop_slack_seconds)
    before = decide(at(asking.status, grace - 1, cancel, **HEALTHY,
                       driver_pods=pods))
    assert before.status.phase == "Running"
    after = decide(at(asking.status, grace + 1, cancel, **HEALTHY,
                      driver_pods=pods))
    assert after.status.phase == "Cancelled"


def test_suspend_checkpoints_deletes_the_cluster_and_resume_starts_a_new_attempt():
    suspend, resume = spec(run_policy={"suspend": True}), SPEC
    asking = decide(at(running_status(), 0, suspend, **HEALTHY,
                       driver_job=RUNNING_JOB))
    assert asking.status.stopping.reason == "Suspended" and asking.delete_jobs == ["r-a1"]
    deleting = decide(at(asking.status, 5, suspend, **HEALTHY,
                         report_data=suspended_report()))
    assert deleting.actions == [Action.DELETE_RAY_CLUSTER]
    assert deleting.status.phase == "Running"  # until the RayCluster is gone
    gone = decide(at(deleting.status, 6, suspend, report_data=suspended_report()))
    s = gone.status
    assert s.phase == "Suspended" and s.stopping is None and gone.requeue_after is None
    assert s.condition("Suspended").status == "True"
    assert "checkpoint step 2" in s.condition("Suspended").message
    assert gone.actions == []
    still = decide(at(s, 600, suspend))
    assert still.status.phase == "Suspended" and still.actions == []

    resumed = decide(at(s, 606, resume))
    r = resumed.status
    assert r.phase == "Provisioning"
    assert (r.recovery.attempt, r.recovery.restarts) == (2, 0)  # not a restart
    assert (r.recovery.history[-1].reason, r.recovery.history[-1].from_step) == ("Resumed", 2)
    assert r.children.driver_job == "r-a2"
    assert r.condition("Suspended").status == "False"
    assert Action.ENSURE_RUN_CHILDREN in resumed.actions
    # The active clock moved on by the 600 s suspended.
    assert r.active_since == s.active_since + 600 * SECOND


def test_the_active_deadline_survives_restarts_and_ends_the_run():
    limited = spec(budget={"active_deadline_seconds": 100})
    status = running_status()
    started = status.active_since
    failed = decide(at(status, 50, limited, **HEALTHY, driver_job=_job("Failed"),
                       driver_pods=[_pod(14)])).status
    again = decide(at(failed, 51, limited, **HEALTHY)).status
    assert again.phase == "Running" and again.active_since == started  # not reset
    running = decide(at(again, 99, limited, **HEALTHY, driver_job=RUNNING_JOB))
    assert running.status.stopping is None
    assert running.requeue_after <= 5
    over = decide(at(again, 101, limited, **HEALTHY, driver_job=RUNNING_JOB))
    assert over.status.stopping.reason == "DeadlineExceeded"
    ended = decide(at(over.status, 102, limited, **HEALTHY))
    assert ended.status.phase == "Failed"
    assert ended.status.terminal.reason == "DeadlineExceeded"


def test_the_pre_running_deadline_counts_from_creation_and_stops_at_the_first_ready_cluster():
    limited = spec(budget={"pre_running_deadline_seconds": 60})
    created = NOW - 30 * SECOND
    accepted = decide(Observed(name="r", generation=1, spec=limited, status=GRPORunStatus(),
                               now=NOW, created=created, policy=HOST_PATHS)).status
    assert accepted.pre_running_since == created
    waiting = decide(at(accepted, 27, limited, ray_cluster=rc_created(0)))
    assert waiting.status.phase == "Provisioning" and waiting.status.stopping is None
    assert waiting.requeue_after == 4  # 3 s left: the next pass is the first one past it
    over = decide(at(waiting.status, 31, limited, ray_cluster=rc_created(0)))
    # Nothing runs yet, so the stop goes straight on to the end.
    assert over.status.phase == "Failed" and over.status.stopping is None
    assert over.status.terminal.reason == "PreRunningDeadlineExceeded"
    assert Action.DELETE_RAY_CLUSTER in over.actions
    # A cluster ready in time stops that clock for good.
    ready = decide(at(accepted, 20, limited, **HEALTHY)).status
    later = decide(at(ready, 3600, limited, **HEALTHY, driver_job=RUNNING_JOB))
    assert later.status.stopping is None and later.status.phase == "Running"


# --- Kueue --------------------------------------------------------------------------------------

def test_a_run_waits_queued_while_kueue_holds_its_cluster_and_preemption_is_not_a_restart():
    queued = spec(run_policy={"queue_name": "team-a"})
    held = {"metadata": {"name": "r"}, "spec": {"suspend": True}}
    accepted = decide(at(GRPORunStatus(), 0, queued)).status
    assert accepted.pre_running_since is None  # the clock starts at Kueue's admission
    waiting = decide(at(accepted, 1, queued, ray_cluster=held))
    assert waiting.status.phase == "Queued"
    assert waiting.status.pre_running_since is None
    admitted = decide(at(waiting.status, 60, queued, ray_cluster={"metadata": {"name": "r"},
                                                                  "spec": {"suspend": False}}))
    assert admitted.status.phase == "Provisioning"
    assert admitted.status.pre_running_since == NOW + 60 * SECOND
    running = decide(at(admitted.status, 61, queued, **HEALTHY)).status
    assert running.phase == "Running"

    preempted = decide(at(running, 100, queued, ray_cluster=held, driver_job=RUNNING_JOB))
    p = preempted.status
    assert p.phase == "Queued" and p.recovery.restarts == 0
    assert (p.recovery.attempt, p.recovery.history[-1].reason) == (2, "Preempted")
    assert preempted.delete_jobs == ["r-a1"]
    # The operator never writes the RayCluster's spec: it only ensures its children exist.
    assert Action.DELETE_RAY_CLUSTER not in preempted.actions


def test_a_queued_run_says_why_in_kueues_words():
    queued = spec(run_policy={"queue_name": "team-a"})
    held = {"metadata": {"name": "r"}, "spec": {"suspend": True}}
    accepted = decide(at(GRPORunStatus(), 0, queued)).status
    short = ("couldn't assign flavors to pod set workers: insufficient unused quota for "
             "nvidia.com/gpu in flavor default-flavor, 8 more needed")
    workload = {"status": {"conditions": [
        {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": short}]}}
    waiting = decide(at(accepted, 1, queued, ray_cluster=held, kueue_workload=workload)).status
    ready = waiting.condition("ClusterReady")
    assert (ready.status, ready.reason) == ("False", "Queued")
    assert ready.message == ("waiting for Kueue to admit the RayCluster (queue team-a): "
                             + short)
    # No Workload yet (or no Kueue to ask): the queue is named, nothing more.
    bare = decide(at(accepted, 1, queued, ray_cluster=held)).status.condition("ClusterReady")
    assert bare.message == "waiting for Kueue to admit the RayCluster (queue team-a)"


@pytest.mark.parametrize(("conditions", "verdict"), [
    ([{"type": "QuotaReserved", "status": "False", "message": "no quota"}], "no quota"),
    ([{"type": "QuotaReserved", "status": "True", "message": "reserved"},
      {"type": "Evicted", "status": "True", "reason": "Preempted",
       "message": "Preempted to accommodate a workload"}],
     "Preempted to accommodate a workload"),
    ([{"type": "QuotaReserved", "status": "True", "message": "reserved"}], None),
    ([{"type": "QuotaReserved", "status": "False", "message": "x" * 5000}], "x" * 300),
    ([], None),
])
def test_kueues_verdict_is_the_message_of_what_holds_the_workload(conditions, verdict):
    assert kueue_verdict({"status": {"conditions": conditions}}) == verdict
    assert kueue_verdict(None) is None


# --- A lost cluster -------------------------------------------------------------------------------

def test_a_running_attempts_deleted_cluster_is_a_restart_on_a_new_cluster():
    d = decide(at(running_status(), 10, ray_cluster=None, driver_job=RUNNING_JOB))
    s = d.status
    assert s.phase == "Recovering" and (s.recovery.attempt, s.recovery.restarts) == (2, 1)
    assert s.recovery.history[-1].reason == "ClusterUnhealthy"
    assert d.delete_jobs == ["r-a1"]
    assert Action.ENSURE_RUN_CHILDREN in d.actions  # makes the RayCluster again


def test_a_cluster_unready_for_longer_than_the_bound_is_recreated():
    policy = Policy(cluster_unhealthy_seconds=60)
    status = running_status()  # ready at NOW
    old = rc_created(-100, provisioned=-90)
    brief = decide(at(status, 10, ray_cluster=old, driver_job=RUNNING_JOB, policy=policy))
    assert brief.status.phase == "Running" and brief.delete_jobs == []
    long = decide(at(brief.status, 80, ray_cluster=old, driver_job=RUNNING_JOB, policy=policy))
    assert long.status.phase == "Recovering"
    assert Action.DELETE_RAY_CLUSTER in long.actions and long.delete_jobs == ["r-a1"]
    assert ("Warning", "ClusterUnhealthy") in [(e.type, e.reason) for e in long.events]
    # The new cluster (never ready yet) is waited for, not deleted.
    new = decide(at(long.status, 200, ray_cluster=rc_created(81), policy=policy))
    assert Action.DELETE_RAY_CLUSTER not in new.actions
    assert new.status.phase == "Recovering"
    # Once ready it counts as lost only after the bound from then, even if no pass saw it
    # ready in between.
    missed = rc_created(81, provisioned=190)
    soon = decide(at(new.status, 240, ray_cluster=missed, policy=policy))
    assert Action.DELETE_RAY_CLUSTER not in soon.actions
    later = decide(at(soon.status, 251, ray_cluster=missed, policy=policy))
    assert Action.DELETE_RAY_CLUSTER in later.actions


def test_a_cluster_made_in_the_second_the_last_one_went_away_is_waited_for():
    """Timestamps have whole seconds: a cluster made just after the ClusterReady condition
    turned False looks created before it. Only KubeRay's word that it was ready counts."""
    policy = Policy(cluster_unhealthy_seconds=15)
    gone = decide(at(running_status(), 0.2, policy=policy)).status  # unready at NOW+0.2
    made_same_second = rc_created(0)
    waiting = decide(at(gone, 40, ray_cluster=made_same_second, policy=policy))
    assert Action.DELETE_RAY_CLUSTER not in waiting.actions
    assert waiting.status.recovery.restarts == gone.recovery.restarts


def test_recovering_on_a_cluster_that_stays_unready_recreates_it_once_past_the_bound():
    policy = Policy(cluster_unhealthy_seconds=60)
    old = rc_created(-100, provisioned=-90)
    unready = decide(at(running_status(), 5, ray_cluster=old, driver_job=_job("Failed"),
                        driver_pods=[_pod(14)], policy=policy)).status
    assert unready.phase == "Recovering"
    waiting = decide(at(unready, 30, ray_cluster=old, policy=policy))
    assert Action.DELETE_RAY_CLUSTER not in waiting.actions
    past = decide(at(waiting.status, 70, ray_cluster=old, policy=policy))
    assert Action.DELETE_RAY_CLUSTER in past.actions
    assert ("Warning", "ClusterUnhealthy") in [(e.type, e.reason) for e in past.events]
    assert past.status.recovery.restarts == 1  # the driver's failure, not another


def disrupted_pod(code: int | None) -> dict:
    pod = _pod(code) if code is not None else {"status": {}}
    pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True",
                                    "reason": "EvictionByEvictionAPI",
                                    "message": "Eviction API: evicting"}]
    return pod


def test_an_evicted_driver_costs_no_restart():
    """A drain evicts the driver: it checkpoints and exits SUSPENDED (13), or vanishes."""
    for code in (13, None):
        status = running_status()
        status.recovery.restarts = SPEC.run_policy.max_restarts  # none left
        d = decide(at(status, 1, **HEALTHY, driver_job=_job("Failed"),
                      driver_pods=[disrupted_pod(code)]))
        s = d.status
        assert s.phase == "Recovering", s.terminal
        assert (s.recovery.attempt, s.recovery.restarts) == (2, SPEC.run_policy.max_restarts)
        assert s.recovery.history[-1].reason == "Disrupted"
        assert "EvictionByEvictionAPI" in s.condition("Recovering").message
    # The pod already gone: the Job's podFailurePolicy rule says it.
    status = running_status()
    status.recovery.restarts = SPEC.run_policy.max_restarts
    by_policy = {"metadata": {"name": "r-a1"}, "status": {"conditions": [
        {"type": "Failed", "status": "True", "reason": "PodFailurePolicy",
         "message": "Pod ns/r-a1-x has condition DisruptionTarget matching FailJob rule at "
                    "index 1"}]}}
    d = decide(at(status, 1, **HEALTHY, driver_job=by_policy))
    assert d.status.phase == "Recovering"
    assert d.status.recovery.history[-1].reason == "Disrupted"
    # A crash of a pod that also happens to be disrupted is still the run's failure.
    crashed = decide(at(running_status(), 1, **HEALTHY, driver_job=_job("Failed"),
                        driver_pods=[disrupted_pod(1)]))
    assert crashed.status.recovery.restarts == 1


# --- GPU metering -------------------------------------------------------------------------------

def gpu_pod(gpus: int, started_seconds: float, phase: str = "Running") -> dict:
    """A Ray worker pod of the cluster holding ``gpus``, ready while Running."""
    started = _stamp(started_seconds)
    return {"metadata": {"name": "w", "labels": {"ray.io/node-type": "worker"}},
            "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": phase, "startTime": started,
                       "conditions": [{"type": "Ready", "status": str(phase == "Running")}],
                       "containerStatuses": [{"state": {"running": {"startedAt": started}}}]}}


HEAD_POD = ray_pod("head")


def test_gpu_seconds_are_metered_from_running_gpu_pods_and_enforce_the_gpu_budget():
    limited = spec(budget={"max_gpu_hours": 0.01})  # 36 GPU-seconds
    every_5s = Policy(meter_interval_seconds=5)
    status = decide(at(running_status(), 0, limited)).status
    first = decide(at(status, 10, limited, ray_cluster=HEALTHY_RC, driver_job=RUNNING_JOB,
                      cluster_pods=[gpu_pod(1, 0), gpu_pod(2, 4), gpu_pod(4, 0, "Pending"),
                                    HEAD_POD], policy=every_5s))
    ledger = first.status.ledger
    assert ledger.gpu_seconds == 1 * 10 + 2 * 6
    assert ledger.gpu_metered_time == NOW + 10 * SECOND
    assert ledger.budget_remaining.gpu_hours == round(0.01 - 22 / 3600, 6)
    idle = decide(at(first.status, 20, limited, ray_cluster=HEALTHY_RC, driver_job=RUNNING_JOB,
                     cluster_pods=[HEAD_POD], policy=every_5s))
    assert idle.status.ledger == ledger  # nothing ran: nothing added, nothing rewritten
    over = decide(at(idle.status, 30, limited, ray_cluster=HEALTHY_RC, driver_job=RUNNING_JOB,
                     cluster_pods=[gpu_pod(1, 0), HEAD_POD], policy=every_5s))
    assert over.status.ledger.gpu_seconds == 22 + 20
    assert over.status.stopping.reason == "BudgetExhausted"


def test_metering_writes_wait_for_their_interval_stretched_by_the_runs_metering_at_once():
    pods = [gpu_pod(1, 0), HEAD_POD]
    status = running_status()  # accepted at NOW: metering counts from there

    def pass_at(seconds: float, metering_runs: int):
        return decide(at(status, seconds, ray_cluster=HEALTHY_RC, driver_job=RUNNING_JOB,
                         cluster_pods=pods, metering_runs=metering_runs))

    few = pass_at(29, 10)
    assert few.status == status and few.requeue_after == 30 - 29 + 1
    assert pass_at(30, 10).status.ledger.gpu_seconds == 30
    # 1000 runs at 5 writes a second: each one's status is written for metering every 200 s.
    assert Policy().meter_writes_per_second == 5
    many = pass_at(150, 1000)
    assert many.status == status and many.requeue_after == 200 - 150 + 1
    assert pass_at(200, 1000).status.ledger.gpu_seconds == 200
    # A pass that writes the status anyway brings GPU-seconds up to date with it.
    reported = decide(at(status, 20, ray_cluster=HEALTHY_RC, driver_job=RUNNING_JOB,
                         cluster_pods=pods, metering_runs=1000, report_data=report(1)))
    assert reported.status.ledger.completed_steps == 1
    assert reported.status.ledger.gpu_seconds == 20
    # A GPU budget is not overrun for want of a metering write: the run is due when its
    # running pods will have used it up, and is metered then.
    limited = spec(budget={"max_gpu_hours": 0.01})  # 36 GPU-seconds
    before = decide(at(status, 10, limited, ray_cluster=HEALTHY_RC, driver_job=RUNNING_JOB,
                       cluster_pods=[gpu_pod(2, 0), HEAD_POD], metering_runs=1000))
    assert before.status == status and before.requeue_after == (36 - 2 * 10) / 2 + 1
    used_up = decide(at(status, 18, limited, ray_cluster=HEALTHY_RC, driver_job=RUNNING_JOB,
                        cluster_pods=[gpu_pod(2, 0), HEAD_POD], metering_runs=1000))
    assert used_up.status.ledger.gpu_seconds == 36
    assert used_up.status.stopping.reason == "BudgetExhausted"


def test_a_waiting_run_is_due_again_only_when_time_alone_changes_something():
    """Its cluster, pods and driver wake it by watch: a pass comes on its own only for the next
    GPU metering while a GPU pod runs, a deadline, the end of a ready cluster's allowed unready
    spell, or the safety net."""
    accepted = decide(at(GRPORunStatus(), 0)).status
    coming_up = rc_created(0)
    idle = decide(at(accepted, 5, ray_cluster=coming_up, cluster_pods=[]))
    assert idle.status.phase == "Provisioning" and idle.requeue_after == RESYNC_SECONDS
    # Metered every interval from acceptance, the pass after the interval (whole seconds).
    metering = decide(at(accepted, 5, ray_cluster=coming_up, cluster_pods=[gpu_pod(1, 2)]))
    assert metering.requeue_after == Policy().meter_interval_seconds - 5 + 1
    cpu_only = spec(resources={"gpus_per_worker": 0})
    cpu = decide(at(decide(at(GRPORunStatus(), 0, cpu_only)).status, 5, cpu_only,
                    ray_cluster=coming_up, cluster_pods=[gpu_pod(1, 2)]))
    assert cpu.requeue_after == RESYNC_SECONDS
    limited = spec(budget={"pre_running_deadline_seconds": 20})
    deadline = decide(at(decide(at(GRPORunStatus(), 0, limited)).status, 5, limited,
                         ray_cluster=coming_up, cluster_pods=[]))
    assert deadline.requeue_after == 20 - 5 + 1
    # Running: the driver's end and its reports come by watch.
    running = decide(at(running_status(), 10, ray_cluster=HEALTHY_RC, driver_job=RUNNING_JOB,
                        cluster_pods=[]))
    assert running.status.phase == "Running" and running.requeue_after == RESYNC_SECONDS
    # A cluster that was ready goes unready: due when its allowed spell ends.
    policy = Policy(cluster_unhealthy_seconds=30)
    unready = decide(at(running_status(), 10, ray_cluster=rc_created(-100, provisioned=-90),
                        driver_job=RUNNING_JOB, cluster_pods=[], policy=policy))
    assert unready.status.condition("ClusterReady").status == "False"
    assert unready.requeue_after == 30 + 1


# --- Retry and TTL --------------------------------------------------------------------------------

def failed_run() -> GRPORunStatus:
    status = running_status()
    status.recovery.restarts = SPEC.run_policy.max_restarts
    failed = decide(at(status, 1, **HEALTHY, driver_job=_job("Failed"),
                       driver_pods=[_pod(14)])).status
    assert failed.terminal.reason == "MaxRestartsExceeded"
    return failed


def test_a_retry_id_reopens_a_failed_run_once():
    failed = failed_run()
    retried = decide(at(failed, 60, annotations={"grpo.dev/retry": "op-1"}))
    s = retried.status
    assert s.phase == "Recovering" and s.terminal is None and s.completion_time is None
    assert (s.recovery.attempt, s.recovery.restarts) == (2, 0)
    assert s.recovery.history[-1].reason == "Retry"
    assert s.seen_retry_ids == ["op-1"]
    assert s.condition("Failed").status == "False"
    assert Action.ENSURE_RUN_CHILDREN in retried.actions
    failed_again = failed_run()
    failed_again.seen_retry_ids = ["op-1"]
    same = decide(at(failed_again, 60, annotations={"grpo.dev/retry": "op-1"}))
    assert same.status.phase == "Failed" and same.status.recovery.attempt == 1


def test_a_retry_id_longer_than_a_name_reopens_once_too():
    long_id = "x" * 300
    retried = decide(at(failed_run(), 60, annotations={"grpo.dev/retry": long_id})).status
    assert retried.recovery.attempt == 2 and retried.seen_retry_ids == [long_id[:253]]
    retried.phase, retried.terminal = failed_run().phase, failed_run().terminal
    again = decide(at(retried, 120, annotations={"grpo.dev/retry": long_id}))
    assert again.status.recovery.attempt == 2 and again.status.phase == "Failed"


def test_a_retry_id_first_seen_before_the_failure_is_not_acted_on():
    seen = decide(at(running_status(), 1, **HEALTHY, driver_job=RUNNING_JOB,
                     annotations={"grpo.dev/retry": "in-git"})).status
    assert seen.seen_retry_ids == ["in-git"] and seen.phase == "Running"


def test_a_refused_run_retried_is_judged_again():
    small = spec(budget={"max_generated_tokens": 10})
    refused = decide(at(GRPORunStatus(), 0, small)).status
    assert refused.phase == "Failed"
    again = decide(at(refused, 5, SPEC, annotations={"grpo.dev/retry": "budget-raised"}))
    assert again.status.phase == "Provisioning" and again.status.recovery.attempt == 1


def test_ttl_deletes_the_run_after_the_end_and_its_cleanup():
    ttl = spec(run_policy={"ttl_seconds_after_finished": 100})
    ended = decide(at(running_status(), 0, ttl, **HEALTHY,
                      driver_job=_job("Failed"), driver_pods=[_pod(10)])).status
    cleaned = decide(at(ended, 1, ttl))
    assert cleaned.status.terminal.cleanup is not None
    assert cleaned.requeue_after == 99 and cleaned.actions == []
    due = decide(at(cleaned.status, 100, ttl))
    assert due.actions == [Action.DELETE_RUN]
