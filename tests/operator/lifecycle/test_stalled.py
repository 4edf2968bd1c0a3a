"""What the operator cannot get past is said on the run, and retried with backoff: a child's
name held by an object the run does not control (made beforehand, or left by a deleted run of
the same name), an API refusal (a ResourceQuota), a status it cannot read (kept as it is)."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import client

from grpo_operator.api.constants import GROUP, PLURAL, VERSION
from tests.operator.conftest import CRD_NAME
from tests.operator.lifecycle.runs import manifest
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


def stuck_run(runs, tmp_path, name: str) -> None:
    """A run whose workers fit no node: it stays Provisioning, nothing trains."""
    runs.create(manifest(name, str(tmp_path), resources__gpusPerWorker=16))


def stalled(runs, name: str) -> dict | None:
    condition = runs.condition(name, "Stalled")
    return condition if condition and condition["status"] == "True" else None


def test_a_pre_created_auth_secret_is_never_used(runs, tmp_path):
    runs.core.create_namespaced_secret(runs.namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="squat-ray-auth"),
        string_data={"auth_token": "a token the squatter knows"}))
    stuck_run(runs, tmp_path, "squat")
    condition = wait_for(lambda: stalled(runs, "squat"), 60, what="Stalled")
    assert condition["reason"] == "ChildConflict"
    assert "Secret squat-ray-auth exists but is controlled by nothing" in condition["message"]
    assert runs.kstatus("squat") == ("Failed", condition["message"])
    assert runs.ray_cluster("squat") is None  # nothing was built on the squatter's token
    # The Event follows the condition's write.
    wait_for(lambda: [e for e in runs.events("squat") if e[:2] == ("Warning", "ChildConflict")],
             30, what="the ChildConflict Event")

    runs.core.delete_namespaced_secret("squat-ray-auth", runs.namespace)
    wait_for(lambda: runs.ray_cluster("squat"), 120, what="the RayCluster once the name is free")
    wait_for(lambda: runs.condition("squat", "Stalled")["status"] == "False", 30,
             what="Stalled cleared")
    assert runs.kstatus("squat") == ("InProgress", "provisioning: step 0/2")
    secret = runs.core.read_namespaced_secret("squat-ray-auth", runs.namespace)
    owners = [r.uid for r in secret.metadata.owner_references]
    assert owners == [runs.get("squat")["metadata"]["uid"]]


def test_a_recreated_run_does_not_adopt_the_children_of_the_deleted_one(operator, runs,
                                                                          tmp_path):
    stuck_run(runs, tmp_path, "again")
    wait_for(lambda: runs.ray_cluster("again"), 60, what="the first RayCluster")
    old_uid = runs.get("again")["metadata"]["uid"]
    # Garbage collection held back, as a slow one would be.
    runs.custom.patch_namespaced_custom_object(
        "ray.io", "v1", runs.namespace, "rayclusters", "again",
        {"metadata": {"finalizers": ["grpo.dev/test-hold"]}})
    runs.delete("again")
    wait_for(lambda: not [r for r in runs.custom.list_namespaced_custom_object(
        GROUP, VERSION, runs.namespace, PLURAL)["items"]], 60, what="the run gone")
    stuck_run(runs, tmp_path, "again")
    held = f"RayCluster again exists but is controlled by GRPORun again (uid {old_uid})"

    def conflict() -> dict | None:  # other children may conflict first, until their GC
        condition = stalled(runs, "again")
        return condition if condition and held in condition["message"] else None
    assert wait_for(conflict, 60, what="Stalled on the held RayCluster")["reason"] == (
        "ChildConflict")

    # The finalizer holds the old cluster only once the garbage collector has deleted it
    # (slow while the session's earlier namespaces go): removed before, the cluster would
    # stay until the collector's turn, which is not the operator's to wait for.
    wait_for(lambda: (runs.ray_cluster("again") or {}).get("metadata", {}).get(
        "deletionTimestamp"), 120, what="the held RayCluster deleted by the garbage collector")
    runs.custom.patch_namespaced_custom_object(
        "ray.io", "v1", runs.namespace, "rayclusters", "again",
        {"metadata": {"finalizers": None}})
    new_uid = runs.get("again")["metadata"]["uid"]
    try:
        wait_for(lambda: [r["uid"] for r in (runs.ray_cluster("again") or {}).get(
            "metadata", {}).get("ownerReferences", [])] == [new_uid], 120,
            what="a RayCluster of the new run")
    except AssertionError as timed_out:  # intermittent: say what the run and its cluster show
        cluster_meta = (runs.ray_cluster("again") or {}).get("metadata")
        conditions = (runs.get("again").get("status") or {}).get("conditions")
        passes = [line for line in operator.log_path.read_text(errors="replace").splitlines()
                  if f"{runs.namespace}/again" in line][-20:]
        raise AssertionError(f"{timed_out}; RayCluster metadata: {cluster_meta}; "
                             f"run conditions: {conditions}; operator log: {passes}") from None


def failed_passes(operator, namespace: str, name: str) -> int:
    """This run's failed passes so far, as the operator logs them (other tests' runs, whose
    namespaces go away, fail passes too: the metric counts them all)."""
    marker = f"reconcile of {namespace}/{name} failed"
    return operator.log_path.read_text(errors="replace").count(marker)


def test_a_quota_refusal_is_said_once_and_retried_with_backoff(operator, runs, tmp_path):
    runs.core.create_namespaced_resource_quota(runs.namespace, client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="no-rayclusters"),
        spec=client.V1ResourceQuotaSpec(hard={"count/rayclusters.ray.io": "0"})))
    wait_for(lambda: runs.core.read_namespaced_resource_quota(
        "no-rayclusters", runs.namespace).status.used is not None, 30,
        what="the quota counted")
    stuck_run(runs, tmp_path, "quota")
    condition = wait_for(lambda: stalled(runs, "quota"), 60, what="Stalled")
    assert condition["reason"] == "Forbidden" and "exceeded quota" in condition["message"]
    errors_before = failed_passes(operator, runs.namespace, "quota")
    time.sleep(40)
    # Backoff 5, 10, 20, 40 s (±20 %): at most 4 more failed passes in 40 s (a fixed 5 s
    # requeue would make 8).
    assert failed_passes(operator, runs.namespace, "quota") - errors_before <= 4
    warnings = [e for e in runs.events("quota") if e[:2] == ("Warning", "Forbidden")]
    assert len(warnings) == 1, warnings


def test_a_status_the_operator_cannot_read_is_kept_and_said(cluster, runs, tmp_path):
    """As under a newer CRD that an older operator does not know: the field is stored, the
    operator's models refuse it."""
    path = "/spec/versions/0/schema/openAPIV3Schema/properties/status/properties/fromNewer"
    cluster.kubectl("patch", "crd", CRD_NAME, "--type=json", "-p", json.dumps(
        [{"op": "add", "path": path, "value": {"type": "string"}}]))
    try:
        stuck_run(runs, tmp_path, "newer")
        wait_for(lambda: runs.phase("newer") == "Provisioning", 60, what="Provisioning")

        def with_field() -> dict | None:
            runs.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, runs.namespace, PLURAL, "newer",
                {"status": {"fromNewer": "x"}})
            return runs.status("newer").get("fromNewer") == "x" and runs.status("newer")
        wait_for(with_field, 30, what="the field stored")
        # A pass while the API server swaps the CRD's storage may see a 404 first: retried.
        condition = wait_for(lambda: (c := stalled(runs, "newer")) and c["reason"] == (
            "StatusUnreadable") and c, 60, what="Stalled as StatusUnreadable")
        assert "fromNewer" in condition["message"]
        kept = runs.status("newer")
        time.sleep(8)
        later = runs.status("newer")
        assert later["fromNewer"] == "x" and later["phase"] == "Provisioning"
        strip = ("conditions",)
        assert {k: v for k, v in later.items() if k not in strip} == {
            k: v for k, v in kept.items() if k not in strip}
    finally:
        cluster.kubectl("patch", "crd", CRD_NAME, "--type=json", "-p", json.dumps(
            [{"op": "remove", "path": path}]))
