"""A driver lost mid-run (its pod deleted, as on a node drain) is followed by a new attempt on
the same warm RayCluster, and the run still completes."""

from __future__ import annotations

import pytest

from tests.operator.lifecycle.runs import tiny_example
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


def test_a_lost_driver_is_replaced_by_a_new_attempt_on_the_same_cluster(cluster, runs,
                                                                        tmp_path):
    body = tiny_example(tmp_path)
    name = body["metadata"]["name"]
    runs.create(body)
    wait_for(lambda: runs.phase(name) == "Running", 120, what="Running")
    first_cluster = runs.custom.get_namespaced_custom_object(
        "ray.io", "v1", runs.namespace, "rayclusters", name)["metadata"]["uid"]

    def driver_pod():
        pods = runs.core.list_namespaced_pod(runs.namespace,
                                             label_selector=f"job-name={name}-a1").items
        return pods[0] if pods and pods[0].status.phase == "Running" else None

    pod = wait_for(driver_pod, 120, what="the first driver running")
    runs.core.delete_namespaced_pod(pod.metadata.name, runs.namespace)

    wait_for(lambda: runs.phase(name) == "Running"
             and runs.status(name)["recovery"]["attempt"] == 2, 180,
             what="the second attempt running")
    second_cluster = runs.custom.get_namespaced_custom_object(
        "ray.io", "v1", runs.namespace, "rayclusters", name)["metadata"]["uid"]
    assert second_cluster == first_cluster  # the warm cluster, not a new one
    wait_for(lambda: runs.phase(name) in ("Succeeded", "Failed"), 600, what="the end")
    status = runs.status(name)
    log = cluster.driver_runner.job_log(runs.namespace, f"{name}-a2")
    assert status["phase"] == "Succeeded", (status.get("terminal"),
                                            log and log.read_text()[-3000:])
    recovery = status["recovery"]
    assert (recovery["attempt"], recovery["restarts"]) == (2, 1)
    assert [h["attempt"] for h in recovery["history"]] == [1, 2]
    assert recovery["history"][1]["reason"] in ("Interrupted", "RetryableFailure", "Killed",
                                                "PodVanished")
    assert sorted(runs.children(name).get("Job", [])) == [f"{name}-a1", f"{name}-a2"]
    assert any(r == "Recovering" for _, r, _ in runs.events(name))
    assert status["terminal"]["outcome"] == "Succeeded"
