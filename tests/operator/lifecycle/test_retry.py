"""A run out of restarts fails with its history; a `grpo.dev/retry` annotation with a new id
gives it one new attempt, which resumes from the checkpoint; the same id again does nothing."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.operator.lifecycle.runs import tiny_example
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


def test_restarts_exhausted_then_retried_once_per_id(runs, tmp_path):
    body = tiny_example(tmp_path)
    name = body["metadata"]["name"]
    body["spec"]["runPolicy"]["maxRestarts"] = 0
    runs.create(body)

    pod = wait_for(lambda: runs.running_driver_pod(name), 300,
                   what="the first driver running")
    runs.core.delete_namespaced_pod(pod.metadata.name, runs.namespace)

    wait_for(lambda: (runs.status(name).get("terminal") or {}).get("cleanup"), 180,
             what="Failed and cleaned up")
    failed = runs.status(name)
    assert failed["phase"] == "Failed"
    assert failed["terminal"]["reason"] == "MaxRestartsExceeded"
    assert [h["attempt"] for h in failed["recovery"]["history"]] == [1]
    checkpoint = (failed["recovery"].get("lastCheckpoint") or {}).get("step")

    runs.patch(name, {"metadata": {"annotations": {"grpo.dev/retry": "op-1"}}})
    wait_for(lambda: runs.in_attempt(name, 2, "Succeeded", "Failed"), 400,
             what="the retried end")
    status = runs.status(name)
    assert status["phase"] == "Succeeded", status.get("terminal")
    assert status["seenRetryIds"] == ["op-1"]
    assert status["recovery"].get("resumedFromStep") == checkpoint
    assert [(h["attempt"], h["reason"]) for h in status["recovery"]["history"]][1] == (
        2, "Retry")
    assert status["recovery"]["restarts"] == 0
    runs.posted(name, lambda e: e[1] == "Retry", what="the Retry Event")

    # Re-applying the same id (as a GitOps sync would) is not another retry.
    runs.patch(name, {"metadata": {"annotations": {"grpo.dev/retry": "op-1",
                                                   "touched": "yes"}}})
    wait_for(lambda: runs.get(name)["metadata"]["annotations"].get("touched") == "yes", 10,
             what="the annotation")
    again = runs.status(name)
    assert (again["phase"], again["recovery"]["attempt"]) == ("Succeeded", 2)


def test_a_drained_driver_costs_no_restart(runs, tmp_path):
    """The eviction API (as `kubectl drain` uses it) takes the driver pod: the API server marks
    it DisruptionTarget, the trainer checkpoints, and the next attempt starts although no
    restart is left."""
    body = tiny_example(tmp_path)
    name = body["metadata"]["name"]
    body["spec"]["runPolicy"]["maxRestarts"] = 0
    runs.create(body)
    pod = wait_for(lambda: runs.running_driver_pod(name), 300, what="the first driver running")
    runs.core.create_namespaced_pod_eviction(
        pod.metadata.name, runs.namespace,
        client.V1Eviction(metadata=client.V1ObjectMeta(name=pod.metadata.name,
                                                       namespace=runs.namespace)))
    wait_for(lambda: runs.in_attempt(name, 2, "Succeeded", "Failed"), 400,
             what="the second end")
    status = runs.status(name)
    assert status["phase"] == "Succeeded", status.get("terminal")
    assert [(h["attempt"], h["reason"]) for h in status["recovery"]["history"]] == [
        (1, "Started"), (2, "Disrupted")]
    assert status["recovery"]["restarts"] == 0
