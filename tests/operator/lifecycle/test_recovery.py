"""A driver lost mid-run (its pod deleted, as on a node drain) is followed by a new attempt on
the same warm RayCluster; a RayCluster whose head is lost and does not come back within the
bound is replaced by a new one for the next attempt; the run still completes."""

from __future__ import annotations

import pytest

from grpo_operator.api.digest import digest_of_directory
from tests.operator.lifecycle.runs import run_failure, tiny_example
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


def test_a_lost_driver_resumes_on_the_warm_cluster_and_a_lost_cluster_is_replaced(
        cluster, runs, tmp_path):
    body = tiny_example(tmp_path)
    name = body["metadata"]["name"]
    body["spec"]["algorithm"]["maxSteps"] = 25  # time to lose the cluster mid-run
    body["spec"]["runPolicy"]["maxRestarts"] = 2
    runs.create(body)
    wait_for(lambda: runs.phase(name) == "Running", 120, what="Running")
    first_cluster = runs.custom.get_namespaced_custom_object(
        "ray.io", "v1", runs.namespace, "rayclusters", name)["metadata"]["uid"]

    pod = wait_for(lambda: runs.running_driver_pod(name), 120,
                   what="the first driver running")
    runs.core.delete_namespaced_pod(pod.metadata.name, runs.namespace)

    wait_for(lambda: runs.in_attempt(name, 2, "Running"), 180,
             what="the second attempt running")
    second_cluster = runs.custom.get_namespaced_custom_object(
        "ray.io", "v1", runs.namespace, "rayclusters", name)["metadata"]["uid"]
    assert second_cluster == first_cluster  # the warm cluster, not a new one
    def a_step_of_the_second_attempt():
        status = runs.status(name)
        done = (status.get("ledger") or {}).get("completedSteps", 0)
        return done > (status["recovery"].get("resumedFromStep") or 0) and done

    assert wait_for(a_step_of_the_second_attempt, 300, what="a step of the second attempt") < 20

    # The head is lost and cannot come back (its node pool is gone). Its drain hook stops the
    # Ray job (the trainer checkpoints and exits), or the driver loses the job, or the operator
    # gives up on the cluster first; whichever, the next attempt does not start on a head being
    # deleted: past the bound the RayCluster is replaced and the next attempt runs on the new one.
    runs.custom.patch_namespaced_custom_object(
        "ray.io", "v1", runs.namespace, "rayclusters", name,
        {"spec": {"headGroupSpec": {"template": {"spec": {
            "nodeSelector": {"grpo.dev/node-pool": "gone"}}}}}})
    heads = runs.core.list_namespaced_pod(
        runs.namespace, label_selector=f"ray.io/cluster={name},ray.io/node-type=head").items
    runs.core.delete_namespaced_pod(heads[0].metadata.name, runs.namespace)
    wait_for(lambda: runs.in_attempt(name, 3, "Running"), 240,
             what="the third attempt running on a new cluster")
    third_cluster = runs.ray_cluster(name)["metadata"]["uid"]
    assert third_cluster != first_cluster

    wait_for(lambda: runs.phase(name) in ("Succeeded", "Failed"), 600, what="the end")
    status = runs.status(name)
    assert status["phase"] == "Succeeded", run_failure(cluster, runs.namespace, status,
                                                       f"{name}-a3")
    recovery = status["recovery"]
    assert (recovery["attempt"], recovery["restarts"]) == (3, 2)
    reasons = [h["reason"] for h in recovery["history"]]
    lost_driver = ("Interrupted", "RetryableFailure", "Killed", "PodVanished", "UnexpectedExit")
    assert reasons[0] == "Started" and reasons[1] in lost_driver
    assert reasons[2] in ("ClusterUnhealthy", *lost_driver)
    assert recovery["resumedFromStep"] >= 1
    assert {f"{name}-a1", f"{name}-a3"} <= set(runs.children(name).get("Job", []))
    runs.posted(name, lambda e: e[1] == "ClusterUnhealthy", what="the ClusterUnhealthy Event")
    assert status["terminal"]["outcome"] == "Succeeded"


def test_a_model_changed_between_attempts_fails_the_run_without_a_digest_in_the_spec(
        cluster, runs, tmp_path):
    body = tiny_example(tmp_path)
    name = body["metadata"]["name"]
    model = tmp_path / "model"
    assert "sha256" not in body["spec"]["model"]
    body["spec"]["algorithm"]["maxSteps"] = 25
    body["spec"]["runPolicy"]["maxRestarts"] = 2
    runs.create(body)
    seen = wait_for(lambda: runs.status(name).get("recovery", {}).get("inputs"), 300,
                    what="the inputs' digests in status")
    assert seen["model"] == digest_of_directory(model)
    pod = wait_for(lambda: runs.running_driver_pod(name), 120, what="the first driver running")
    (model / "README.md").write_text("swapped in while no attempt was looking")
    runs.core.delete_namespaced_pod(pod.metadata.name, runs.namespace)

    wait_for(lambda: runs.phase(name) in ("Succeeded", "Failed"), 300, what="the end")
    status = runs.status(name)
    terminal, recovery = status["terminal"], status["recovery"]
    assert (terminal["reason"], recovery["attempt"]) == ("FrozenInputChanged", 2), status
    assert f"an earlier attempt of this run found {seen['model']}" in terminal["message"]
    assert recovery["inputs"] == seen  # the first digests are kept
    assert recovery["restarts"] == 1  # the lost driver's; the refusal is not retried
