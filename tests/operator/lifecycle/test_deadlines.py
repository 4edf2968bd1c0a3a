"""The pre-running deadline ends a run whose GPUs never come (and the TTL then deletes it);
the active deadline stops a running trainer and ends the run. Both clean up."""

from __future__ import annotations

import pytest

from tests.operator.lifecycle.runs import manifest, tiny_example
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


def test_unschedulable_gpus_hit_the_pre_running_deadline_then_the_ttl(runs, tmp_path):
    body = manifest("no-gpus", str(tmp_path), resources__gpusPerWorker=16,
                    budget__preRunningDeadlineSeconds=8,
                    runPolicy__ttlSecondsAfterFinished=6)
    runs.create(body)
    wait_for(lambda: runs.ray_cluster("no-gpus"), 30, what="the RayCluster")
    wait_for(lambda: runs.phase("no-gpus") == "Failed", 60, what="the deadline")
    status = runs.status("no-gpus")
    assert status["terminal"]["reason"] == "PreRunningDeadlineExceeded"
    assert "activeSince" not in status  # never ran
    assert status["recovery"]["attempt"] == 1 and "Job" not in runs.children("no-gpus")

    def gone():
        try:
            runs.get("no-gpus")
        except Exception as e:  # noqa: BLE001
            return getattr(e, "status", None) == 404
        return False

    wait_for(gone, 60, what="the run deleted by its TTL")
    assert runs.ray_cluster("no-gpus") is None


def test_a_running_trainer_is_stopped_at_the_active_deadline(runs, tmp_path):
    body = tiny_example(tmp_path)
    name = body["metadata"]["name"]
    body["spec"]["algorithm"]["maxSteps"] = 200
    body["spec"]["budget"]["activeDeadlineSeconds"] = 45
    runs.create(body)
    wait_for(lambda: (runs.status(name).get("terminal") or {}).get("cleanup"), 300,
             what="the deadline and the cleanup")
    status = runs.status(name)
    assert status["phase"] == "Failed"
    assert status["terminal"]["reason"] == "DeadlineExceeded"
    assert status["ledger"]["completedSteps"] < 200
    assert "RayCluster" not in runs.children(name)
    # The driver's Job was deleted at the stop; its pod goes with it once its process exits.
    wait_for(lambda: not runs.core.list_namespaced_pod(
        runs.namespace, label_selector=f"job-name={name}-a1").items, 60,
        what="the driver pod gone")
