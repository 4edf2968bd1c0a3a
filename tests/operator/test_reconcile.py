"""The phase machine as a pure function: observed state in, status and actions out."""

from __future__ import annotations

import datetime
import json

import pytest

from grpo_operator.acceptance import Confinement
from grpo_operator.api.constants import TrainerActivity
from grpo_operator.api.contract import CONTRACT_VERSION
from grpo_operator.api.report import (
    MAX_REPORT_BYTES,
    MAX_SEQUENCE_STEP,
    Report,
    TrainerState,
    sign_report,
)
from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.api.status import (
    ArtifactRef,
    AttemptFailure,
    GRPORunStatus,
    InputDigests,
    ReportCursor,
    TrainerLedger,
    TrainerProgress,
    TrainerRecovery,
    TrainerTerminal,
)
from grpo_operator.reconcile import Action, Observed, Policy, decide

NOW = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.UTC)
SPEC = GRPORunSpec.model_validate({
    "model": {"volume": {"hostPath": {"path": "/m"}}},
    "dataset": {"volume": {"hostPath": {"path": "/d"}}, "trainFile": "t.parquet"},
    "reward": {"name": "gsm8k"},
    "algorithm": {"maxSteps": 3, "groupSize": 2, "promptsPerStep": 2,
                  "maxResponseTokens": 8},
    "resources": {"image": "i", "workers": 1, "gpusPerWorker": 1},
    "checkpoint": {"volume": {"hostPath": {"path": "/c"}}},
    "budget": {"maxGeneratedTokens": 1000},
})
# SPEC mounts host directories: an installation that allows them, as the local cluster's does.
HOST_PATHS = Policy(confinement=Confinement(host_path_prefixes=("/",)))
HEALTHY_RC = {"metadata": {"name": "r"}, "status": {
    "readyWorkerReplicas": 1,
    "conditions": [{"type": "HeadPodReady", "status": "True"}]}}


def ray_pod(node_type: str) -> dict:
    return {"metadata": {"name": f"r-{node_type}", "labels": {"ray.io/node-type": node_type}},
            "spec": {"containers": [{}]},
            "status": {"phase": "Running", "startTime": "2026-11-29T11:00:00Z",
                       "conditions": [{"type": "Ready", "status": "True"}]}}


# A ready cluster as a pass sees it: health comes from its pods.
HEALTHY = {"ray_cluster": HEALTHY_RC, "cluster_pods": [ray_pod("head"), ray_pod("worker")]}
RUNNING_JOB = {"metadata": {"name": "r-a1"}, "status": {"active": 1}}


def _job(condition: str) -> dict:
    return {"metadata": {"name": "r-a1"},
            "status": {"conditions": [{"type": condition, "status": "True", "message": "m"}]}}


def _pod(code: int) -> dict:
    return {"status": {"containerStatuses": [{"state": {"terminated": {"exitCode": code}}}]}}


REPORT_KEY = b"k" * 32


def signed(kw: dict) -> dict:
    """Observed's fields with the report signed by the run's key, as the driver writes it
    (unless the test gives its own report_signature)."""
    kw.setdefault("report_key", REPORT_KEY)
    if kw.get("report_data") and "report_signature" not in kw:
        kw["report_signature"] = sign_report(REPORT_KEY, kw["report_data"])
    return kw


def observe(status: GRPORunStatus | None = None, **kw) -> Observed:
    return Observed(name="r", generation=1, spec=SPEC, status=status or GRPORunStatus(),
                    now=NOW, **signed({"policy": HOST_PATHS, **kw}))


def running_status() -> GRPORunStatus:
    """A run that was accepted, provisioned and started."""
    accepted = decide(observe()).status
    return decide(observe(accepted, **HEALTHY)).status


def report(sequence: int, state=TrainerState.RUNNING, attempt: int = 1, steps: int = 1,
           terminal: TrainerTerminal | None = None) -> str:
    return Report(schema_version=1, contract_version=str(CONTRACT_VERSION), attempt=attempt,
                  sequence=sequence, time=NOW, state=state,
                  ledger=TrainerLedger(planned_steps=3, completed_steps=steps,
                                       generated_tokens=40 * steps,
                                       eval_generated_tokens=5 * steps),
                  terminal=terminal).to_json()


def finished(outcome="Succeeded", reason="Completed", artifact=True) -> str:
    terminal = TrainerTerminal(
        outcome=outcome, reason=reason, message="done", finished_time=NOW,
        artifact=ArtifactRef(path="/checkpoints/u/artifact", step=3, sha256="a" * 64)
        if artifact else None)
    return report(9, TrainerState.FINISHED, steps=3, terminal=terminal)


def test_acceptance_then_provisioning_then_running():
    d = decide(observe())
    assert d.status.phase == "Provisioning"
    assert d.actions == [Action.ENSURE_RUN_CHILDREN]
    assert d.status.condition("Accepted").status == "True"
    assert d.status.recovery.attempt == 1 and d.status.children.driver_job == "r-a1"
    assert d.status.ledger.planned_steps == 3
    d2 = decide(observe(d.status, **HEALTHY))
    assert d2.status.phase == "Running"
    assert d2.actions == [Action.ENSURE_RUN_CHILDREN, Action.ENSURE_DRIVER_JOB]
    assert d2.status.condition("ClusterReady").status == "True"
    # The transition time of Accepted does not move when nothing changed.
    assert d2.status.condition("Accepted") == d.status.condition("Accepted")


def test_the_pass_that_makes_the_cluster_writes_what_the_next_pass_sees():
    """The first pass records the cluster it is about to make as provisioning: the next pass,
    finding it there and not ready, has nothing new to write."""
    first = decide(observe())
    assert Action.ENSURE_RUN_CHILDREN in first.actions
    ready = first.status.condition("ClusterReady")
    assert (ready.status, ready.reason) == ("False", "Provisioning")
    unready = {"metadata": {"name": "r"}, "status": {}}
    second = decide(observe(first.status, ray_cluster=unready, cluster_pods=[]))
    assert second.status.to_wire() == first.status.to_wire()
    # A running attempt's cluster gone says so (that pass restarts the attempt, makes nothing).
    lost = decide(observe(running_status(), ray_cluster=None))
    assert lost.status.condition("ClusterReady").reason == "Absent"


def test_refusal_creates_nothing():
    spec = SPEC.model_copy(update={"budget": SPEC.budget.model_copy(
        update={"max_generated_tokens": 10})})
    d = decide(Observed(name="r", generation=1, spec=spec, status=GRPORunStatus(), now=NOW))
    assert d.status.phase == "Failed" and d.actions == []
    assert d.status.condition("Accepted").reason == "BudgetTooSmall"
    assert d.requeue_after is None


def test_reports_are_mirrored_in_order():
    status = running_status()
    d = decide(observe(status, **HEALTHY, driver_job=RUNNING_JOB,
                       report_data=report(0)))
    assert d.status.ledger.completed_steps == 1
    # Training's and the evaluations' tokens both count against the budget.
    assert d.status.ledger.budget_remaining.generated_tokens == 1000 - 40 - 5
    assert d.status.accepted_report == ReportCursor(attempt=1, sequence=0)
    assert not [e for e in d.events if e.type == "Warning"]


def test_an_image_newer_than_the_operator_fails_the_run_without_a_restart():
    status = running_status()
    newer = f"{CONTRACT_VERSION.major}.{CONTRACT_VERSION.minor + 1}"
    # Read before the rest: a newer image's report may not even parse here.
    data = json.dumps(json.loads(report(0)) | {"contractVersion": newer, "newField": 1})
    d = decide(observe(status, **HEALTHY, driver_job=RUNNING_JOB,
                       report_data=data))
    assert d.status.phase == "Failed" and d.status.recovery.restarts == 0
    assert d.status.terminal.reason == "IncompatibleTrainer"
    assert f"speaks contract {newer}" in d.status.condition("Failed").message
    assert d.delete_jobs == [status.children.driver_job]
    assert Action.DELETE_RAY_CLUSTER in d.actions
    assert [e.reason for e in d.events if e.type == "Warning"][:1] == ["IncompatibleTrainer"]
    assert d.status.ledger.completed_steps == 0  # nothing of that report was taken


def test_the_reporting_images_contract_version_is_recorded():
    status = running_status()
    versioned = report(0)
    d = decide(observe(status, **HEALTHY, driver_job=RUNNING_JOB,
                       report_data=versioned))
    assert d.status.trainer_contract_version == json.loads(versioned)["contractVersion"]
    unversioned = json.dumps({k: v for k, v in json.loads(report(1)).items()
                              if k != "contractVersion"})  # an image from before versions
    d = decide(observe(d.status, **HEALTHY, driver_job=RUNNING_JOB,
                       report_data=unversioned))
    assert d.status.phase == "Running" and d.status.trainer_contract_version == "1.0"


def test_the_first_input_digests_reported_are_kept():
    """What a later attempt is checked against: the first digests the operator accepted; a
    later report (an attempt that found other inputs, or a mistaken trainer) replaces none."""
    first, other = InputDigests(model="a" * 64, dataset="b" * 64), InputDigests(
        model="c" * 64, dataset="d" * 64)

    def with_inputs(sequence: int, attempt: int, inputs: InputDigests | None) -> str:
        return Report(schema_version=1, attempt=attempt, sequence=sequence, time=NOW,
                      state=TrainerState.RUNNING, ledger=TrainerLedger(planned_steps=3),
                      recovery=TrainerRecovery(inputs=inputs)).to_json()

    status = running_status()
    kept = decide(observe(status, **HEALTHY, driver_job=RUNNING_JOB,
                          report_data=with_inputs(0, 1, None))).status
    assert kept.recovery.inputs is None
    for sequence, inputs in ((1, first), (2, other), (3, None)):
        kept = decide(observe(kept, **HEALTHY, driver_job=RUNNING_JOB,
                              report_data=with_inputs(sequence, 1, inputs))).status
        assert kept.recovery.inputs == first, sequence


@pytest.mark.parametrize(("data", "why"), [
    ("{not json", "invalid report"),
    (json.dumps({"schemaVersion": 1, "attempt": 1, "sequence": 5, "time": NOW.isoformat(),
                 "state": "Running", "surprise": 1}), "invalid report"),
    (json.dumps({"schemaVersion": 2, "attempt": 1, "sequence": 5, "time": NOW.isoformat(),
                 "state": "Running"}), "invalid report"),
    ("x" * (MAX_REPORT_BYTES + 1), "invalid report"),
    (report(1, attempt=7), "attempt 7"),
])
def test_bad_reports_are_ignored_with_a_warning(data, why):
    status = running_status()
    status = decide(observe(status, **HEALTHY, driver_job=RUNNING_JOB,
                            report_data=report(3, steps=2))).status
    d = decide(observe(status, **HEALTHY, driver_job=RUNNING_JOB,
                       report_data=data))
    warnings = [e for e in d.events if e.type == "Warning"]
    assert len(warnings) == 1 and warnings[0].reason == "ReportRejected"
    assert why in warnings[0].message
    assert d.status.ledger.completed_steps == 2  # unchanged
    assert d.status.phase == "Running"


@pytest.mark.parametrize(("signature", "why"), [
    (None, "unsigned"),
    ("0" * 64, "bad signature"),
    (sign_report(b"another run's key" * 2, report(4, steps=3)), "bad signature"),
])
def test_a_report_counts_only_signed_with_the_runs_key(signature, why):
    status = decide(observe(running_status(), **HEALTHY, driver_job=RUNNING_JOB,
                            report_data=report(3, steps=2))).status
    d = decide(observe(status, **HEALTHY, driver_job=RUNNING_JOB,
                       report_data=report(4, steps=3), report_signature=signature))
    assert [e.reason for e in d.events] == ["ReportRejected"] and why in d.events[0].message
    assert d.status.ledger.completed_steps == 2
    assert d.status.accepted_report == ReportCursor(attempt=1, sequence=3)


def test_a_sequence_jump_past_the_bound_is_refused_and_later_reports_still_count():
    status = decide(observe(running_status(), **HEALTHY, driver_job=RUNNING_JOB,
                            report_data=report(3, steps=1))).status
    huge = decide(observe(status, **HEALTHY, driver_job=RUNNING_JOB,
                          report_data=report(2**53, steps=3)))
    assert [e.reason for e in huge.events] == ["ReportRejected"]
    assert "jumps" in huge.events[0].message
    assert huge.status.accepted_report.sequence == 3
    first = decide(observe(running_status(), **HEALTHY, driver_job=RUNNING_JOB,
                           report_data=report(MAX_SEQUENCE_STEP + 1)))
    assert "jumps" in first.events[0].message and first.status.accepted_report is None
    genuine = decide(observe(huge.status, **HEALTHY, driver_job=RUNNING_JOB,
                             report_data=report(9, steps=2)))
    assert genuine.events == [] and genuine.status.ledger.completed_steps == 2


def test_a_terminal_success_report_without_the_drivers_exit_0_is_not_a_success():
    """A signed-looking Succeeded report, then the driver pod deleted (no exit code): the
    attempt is lost and restarted, never Succeeded."""
    d = decide(observe(running_status(), **HEALTHY, driver_job=_job("Failed"),
                       report_data=finished()))
    assert d.status.phase == "Recovering" and d.status.terminal is None
    assert ("Warning", "ReportRejected") in [(e.type, e.reason) for e in d.events]
    crashed = decide(observe(running_status(), **HEALTHY,
                             driver_job=_job("Failed"), driver_pods=[_pod(1)],
                             report_data=finished()))
    assert crashed.status.phase == "Recovering"


def test_a_stale_report_is_ignored_and_the_same_one_is_not_news():
    status = decide(observe(running_status(), **HEALTHY, driver_job=RUNNING_JOB,
                            report_data=report(3, steps=2))).status
    same = decide(observe(status, **HEALTHY, driver_job=RUNNING_JOB,
                          report_data=report(3, steps=2)))
    assert same.events == []
    stale = decide(observe(status, **HEALTHY, driver_job=RUNNING_JOB,
                           report_data=report(2, steps=1)))
    assert [e.reason for e in stale.events] == ["ReportRejected"]
    assert "stale" in stale.events[0].message
    assert stale.status.ledger.completed_steps == 2


def test_success_needs_the_terminal_report_with_an_artifact():
    status = running_status()
    d = decide(observe(status, **HEALTHY, driver_job=_job("Complete"),
                       report_data=finished()))
    assert d.status.phase == "Succeeded"
    assert d.status.terminal.artifact.sha256 == "a" * 64
    assert Action.DELETE_RAY_CLUSTER in d.actions
    assert d.status.condition("Succeeded").status == "True"
    assert d.status.condition("Running").status == "False"
    no_report = decide(observe(status, **HEALTHY, driver_job=_job("Complete")))
    assert no_report.status.phase == "Failed"
    assert no_report.status.terminal.reason == "MissingTerminalReport"


@pytest.mark.parametrize(("code", "reason"), [
    (10, "InvalidInput"), (11, "FrozenInputChanged"), (12, "BudgetExhausted"),
    (15, "WeightSyncIncomplete"),
])
def test_a_non_retryable_failure_ends_the_run_with_the_cause(code, reason):
    d = decide(observe(running_status(), **HEALTHY, driver_job=_job("Failed"),
                       driver_pods=[_pod(code)]))
    assert d.status.phase == "Failed"
    assert d.status.terminal.reason == reason
    assert d.status.condition("Failed").status == "True"


def test_the_trainers_terminal_report_outranks_the_exit_code():
    failed = finished(outcome="Failed", reason="FrozenInputChanged", artifact=False)
    d = decide(observe(running_status(), **HEALTHY, driver_job=_job("Failed"),
                       driver_pods=[_pod(1)], report_data=failed))
    assert d.status.terminal.reason == "FrozenInputChanged"


def test_cleanup_receipt_only_once_the_cluster_is_gone():
    status = decide(observe(running_status(), **HEALTHY,
                            driver_job=_job("Complete"), report_data=finished())).status
    still_there = decide(observe(status, **HEALTHY))
    assert still_there.status.terminal.cleanup is None
    assert still_there.actions == [Action.DELETE_RAY_CLUSTER]
    gone = decide(observe(status, ray_cluster=None))
    assert gone.status.terminal.cleanup.ray_cluster_deleted is True
    assert gone.requeue_after is None
    again = decide(observe(gone.status, ray_cluster=None))
    assert again.status == gone.status and again.events == []


@pytest.mark.parametrize(("code", "reason"), [
    (14, "RetryableFailure"), (137, "Killed"), (1, "UnexpectedExit"), (None, "PodVanished"),
    (16, "WeightSyncMismatch"),
    (13, "Interrupted"),  # SUSPENDED without a suspension asked for: the pod was deleted
])
def test_a_retryable_failure_starts_the_next_attempt_on_the_same_cluster(code, reason):
    pods = [] if code is None else [_pod(code)]
    d = decide(observe(running_status(), **HEALTHY, driver_job=_job("Failed"),
                       driver_pods=pods))
    s = d.status
    assert s.phase == "Recovering"
    assert (s.recovery.attempt, s.recovery.restarts) == (2, 1)
    assert s.children.driver_job == "r-a2"
    assert [(h.attempt, h.reason) for h in s.recovery.history] == [(1, "Started"), (2, reason)]
    assert s.condition("Recovering").status == "True"
    assert d.actions == [Action.ENSURE_RUN_CHILDREN]  # the new attempt's run config
    assert Action.DELETE_RAY_CLUSTER not in d.actions  # the warm cluster is kept
    resumed = decide(observe(s, **HEALTHY))
    assert resumed.status.phase == "Running"
    assert resumed.actions == [Action.ENSURE_RUN_CHILDREN, Action.ENSURE_DRIVER_JOB]
    assert resumed.status.condition("Recovering").status == "False"


def test_the_trainers_progress_shows_while_it_trains_and_goes_with_its_attempt():
    progress = TrainerProgress(activity=TrainerActivity.TRAINING, since=NOW, step_seconds=5.0,
                               remaining_seconds=10.0)
    data = Report(schema_version=1, attempt=1, sequence=0, time=NOW, state=TrainerState.RUNNING,
                  ledger=TrainerLedger(planned_steps=3, completed_steps=1),
                  progress=progress).to_json()
    d = decide(observe(running_status(), **HEALTHY, driver_job=RUNNING_JOB,
                       report_data=data))
    shown = d.status.progress
    assert (shown.activity, shown.percent, shown.eta) == ("Training", 33, "10s")
    assert d.status.condition("Reconciling").message == "running: step 1/3"
    # The attempt fails: the next one reports its own progress; until then there is none.
    failed = decide(observe(d.status, **HEALTHY, driver_job=_job("Failed"),
                            driver_pods=[_pod(14)], report_data=data))
    assert failed.status.phase == "Recovering" and failed.status.progress is None


def test_an_ended_run_keeps_its_progress_without_a_time_left():
    progress = TrainerProgress(activity=TrainerActivity.SEALING_ARTIFACT, since=NOW,
                               step_seconds=5.0, remaining_seconds=0.0)
    report = Report.model_validate_json(finished())
    data = report.model_copy(update={"progress": progress}).to_json()
    d = decide(observe(running_status(), **HEALTHY, driver_job=_job("Complete"),
                       driver_pods=[_pod(0)], report_data=data))
    assert d.status.phase == "Succeeded"
    assert (d.status.progress.percent, d.status.progress.eta) == (100, None)
    assert d.status.condition("Ready").status == "True"


def _failure_report(reason: str) -> str:
    return Report(schema_version=1, attempt=1, sequence=4, time=NOW, state=TrainerState.RUNNING,
                  ledger=TrainerLedger(planned_steps=3, completed_steps=1),
                  failure=AttemptFailure(reason=reason, message="step 2: mismatch 0.31 > 0.001"),
                  ).to_json()


def test_the_trainers_named_failure_says_why_an_attempt_restarts():
    d = decide(observe(running_status(), **HEALTHY, driver_job=_job("Failed"),
                       driver_pods=[_pod(16)], report_data=_failure_report("WeightSyncMismatch")))
    assert d.status.phase == "Recovering"
    assert "mismatch 0.31 > 0.001" in d.status.condition("Recovering").message
    warnings = [(e.reason, e.message) for e in d.events if e.type == "Warning"]
    assert warnings and warnings[0][0] == "WeightSyncMismatch"
    assert "mismatch 0.31" in warnings[0][1]


def test_a_named_failure_that_the_exit_code_does_not_mean_is_not_believed():
    d = decide(observe(running_status(), **HEALTHY, driver_job=_job("Failed"),
                       driver_pods=[_pod(14)], report_data=_failure_report("WeightSyncMismatch")))
    assert d.status.phase == "Recovering"
    assert "mismatch" not in d.status.condition("Recovering").message
    assert not [e for e in d.events if e.type == "Warning"]


def test_no_restart_left_fails_the_run():
    status = running_status()
    status.recovery.restarts = SPEC.run_policy.max_restarts
    d = decide(observe(status, **HEALTHY, driver_job=_job("Failed"),
                       driver_pods=[_pod(14)]))
    assert d.status.phase == "Failed"
    assert d.status.terminal.reason == "MaxRestartsExceeded"


def test_a_missing_driver_job_is_created_again_under_the_same_attempt():
    d = decide(observe(running_status(), **HEALTHY, driver_job=None))
    assert d.status.phase == "Running" and d.status.recovery.attempt == 1
    assert Action.ENSURE_DRIVER_JOB in d.actions


def test_a_report_config_map_deleted_mid_run_is_made_again():
    d = decide(observe(running_status(), **HEALTHY, driver_job=RUNNING_JOB,
                       report_map_missing=True))
    assert Action.ENSURE_DRIVER_JOB in d.actions and d.status.phase == "Running"
    assert [e.reason for e in d.events] == ["ChildMissing"]


def _waiting_pod(name: str, reason: str, message: str) -> dict:
    return {"metadata": {"name": name}, "status": {"phase": "Pending", "containerStatuses": [
        {"name": "ray-head", "state": {"waiting": {"reason": reason, "message": message}}}]}}


def test_why_the_clusters_pods_do_not_start_is_said_on_the_run():
    accepted = decide(observe()).status
    unready = {"metadata": {"name": "r"}, "status": {}}
    pulling = _waiting_pod("r-head-x", "ImagePullBackOff", 'Back-off pulling image "nope:1"')
    d = decide(observe(accepted, ray_cluster=unready, cluster_pods=[pulling]))
    ready = d.status.condition("ClusterReady")
    assert ready.status == "False"
    assert ready.message == ('pod r-head-x container ray-head: ImagePullBackOff: Back-off '
                             'pulling image "nope:1"')
    assert ("Warning", "PodNotStarting") in [(e.type, e.reason) for e in d.events]
    unschedulable = {"metadata": {"name": "r-worker-y"}, "status": {"conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]}}
    d = decide(observe(accepted, ray_cluster=unready, cluster_pods=[unschedulable]))
    assert "r-worker-y is unschedulable: 0/3 nodes" in d.status.condition("ClusterReady").message
    fine = decide(observe(accepted, ray_cluster=unready, cluster_pods=[
        _waiting_pod("r-head-x", "ContainerCreating", "")]))
    assert fine.status.condition("ClusterReady").message == ""
    assert "PodNotStarting" not in [e.reason for e in fine.events]


def test_why_the_driver_does_not_start_is_said_in_the_running_condition():
    missing = _waiting_pod("r-a1-abc", "CreateContainerConfigError",
                           'secret "r-ray-auth" not found')
    d = decide(observe(running_status(), **HEALTHY, driver_job=RUNNING_JOB,
                       driver_pods=[missing]))
    running = d.status.condition("Running")
    assert running.status == "True" and d.status.phase == "Running"
    assert running.message == ('driver Job r-a1; pod r-a1-abc container ray-head: '
                               'CreateContainerConfigError: secret "r-ray-auth" not found')
    assert ("Warning", "PodNotStarting") in [(e.type, e.reason) for e in d.events]
