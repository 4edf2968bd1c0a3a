"""With a queue, the RayCluster carries Kueue's queue label and the operator leaves its
spec.suspend to Kueue: while it is held the run is Queued; admission starts the pre-running
clock.

Kueue itself is not installed: what its webhook does to a queued RayCluster (create it held,
``spec.suspend: true``) is done by a MutatingAdmissionPolicy in the real API server, and the
test admits the cluster the way Kueue does, by setting ``spec.suspend: false``."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes.dynamic import DynamicClient

from tests.operator.lifecycle.runs import manifest
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def hold_queued_clusters(api, namespace: str) -> Iterator[None]:
    """RayClusters created in ``namespace`` with a queue label are created held."""
    dynamic = DynamicClient(api)
    name = f"hold-queued-{namespace}"
    policies = dynamic.resources.get(api_version="admissionregistration.k8s.io/v1",
                                     kind="MutatingAdmissionPolicy")
    bindings = dynamic.resources.get(api_version="admissionregistration.k8s.io/v1",
                                     kind="MutatingAdmissionPolicyBinding")
    policies.create(body={
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["ray.io"], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["rayclusters"]}]},
            "matchConditions": [{"name": "queued", "expression":
                                 "has(object.metadata.labels) && "
                                 f"'{QUEUE_LABEL}' in object.metadata.labels"}],
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                "expression": "Object{spec: Object.spec{suspend: true}}"}}],
        }})
    bindings.create(body={
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": name},
        "spec": {"policyName": name, "matchResources": {"namespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": namespace}}}}})
    # The API server loads a new policy asynchronously: probe with dry-run creates until a
    # queued RayCluster comes back held.
    rayclusters = dynamic.resources.get(api_version="ray.io/v1", kind="RayCluster")
    probe = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
             "metadata": {"name": "probe", "labels": {QUEUE_LABEL: "probe"}},
             "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
                 "containers": [{"name": "ray-head", "image": "probe"}]}}}}}
    wait_for(lambda: rayclusters.create(body=probe, namespace=namespace, dry_run="All")
             .to_dict()["spec"].get("suspend") is True, 30, what="the policy in effect")
    try:
        yield
    finally:
        bindings.delete(name=name)
        policies.delete(name=name)


@pytest.fixture
def kueue_webhook(runs) -> Iterator[None]:
    yield from hold_queued_clusters(runs.api, runs.namespace)


def test_a_held_cluster_keeps_the_run_queued_until_admitted(runs, kueue_webhook, tmp_path):
    # 16 GPUs per worker never fit the 8-GPU nodes: the cluster stays unready after admission.
    body = manifest("queued", str(tmp_path), resources__gpusPerWorker=16,
                    runPolicy__queueName="team-a")
    runs.create(body)
    rc = wait_for(lambda: runs.ray_cluster("queued"), 30, what="the RayCluster")
    assert rc["metadata"]["labels"][QUEUE_LABEL] == "team-a"
    assert rc["spec"]["suspend"] is True  # created held, as Kueue's webhook does
    wait_for(lambda: runs.phase("queued") == "Queued", 30, what="Queued")
    time.sleep(6)  # a few reconcile passes
    assert runs.ray_cluster("queued")["spec"]["suspend"] is True  # left alone
    status = runs.status("queued")
    assert status["phase"] == "Queued" and "preRunningSince" not in status
    assert status["recovery"]["restarts"] == 0

    runs.custom.patch_namespaced_custom_object("ray.io", "v1", runs.namespace, "rayclusters",
                                               "queued", {"spec": {"suspend": False}})
    wait_for(lambda: runs.phase("queued") == "Provisioning", 30, what="admitted")
    assert "preRunningSince" in runs.status("queued")

    plain = manifest("unqueued", str(tmp_path), resources__gpusPerWorker=16)
    runs.create(plain)
    rc = wait_for(lambda: runs.ray_cluster("unqueued"), 30, what="the other RayCluster")
    assert QUEUE_LABEL not in rc["metadata"].get("labels", {})
