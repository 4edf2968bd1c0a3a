"""Killing the operator mid-provisioning and mid-run loses nothing and duplicates nothing:
one RayCluster, one driver Job for the attempt, and the run completes."""

from __future__ import annotations

import pytest

from tests.operator.lifecycle.runs import tiny_example
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


def test_operator_restarts_mid_provisioning_and_mid_run(operator, runs, tmp_path):
    body = tiny_example(tmp_path)
    name = body["metadata"]["name"]
    runs.create(body)

    def ray_cluster_uid():
        found = runs.custom.list_namespaced_custom_object(
            "ray.io", "v1", runs.namespace, "rayclusters", label_selector=f"grpo.dev/run={name}")
        return [rc["metadata"]["uid"] for rc in found["items"]]

    first = wait_for(ray_cluster_uid, 60, what="the RayCluster")
    operator.kill()  # SIGKILL while provisioning
    operator.start()

    wait_for(lambda: (runs.status(name).get("ledger") or {}).get("completedSteps", 0) >= 1,
             400, what="the first step in status")
    operator.kill()  # SIGKILL while the trainer runs
    operator.start()

    wait_for(lambda: runs.phase(name) in ("Succeeded", "Failed"), 400, what="the end")
    status = runs.status(name)
    assert status["phase"] == "Succeeded", status
    assert status["recovery"]["attempt"] == 1
    assert [h["attempt"] for h in status["recovery"]["history"]] == [1]
    jobs = runs.children(name).get("Job", [])
    assert jobs == [f"{name}-a1"]
    # The RayCluster is deleted at the end; until then it was always the first one.
    assert ray_cluster_uid() in ([], first)
    started = [e for e in runs.events(name) if e[1] == "Running"]
    assert len(started) == 1, started
