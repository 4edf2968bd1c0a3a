"""A RayCluster's health from its pods, by KubeRay's rule, whatever KubeRay's status says."""

from __future__ import annotations

from grpo_operator.health import ClusterHealth, cluster_health

READY_RC = {"metadata": {"name": "r"}, "status": {
    "state": "ready", "readyWorkerReplicas": 1,
    "conditions": [{"type": "HeadPodReady", "status": "True"}]}}
NEW_RC = {"metadata": {"name": "r"}}  # no status from KubeRay yet


def pod(node_type: str, *, ready: bool = True, deleting: bool = False) -> dict:
    meta = {"name": f"r-{node_type}", "labels": {"ray.io/node-type": node_type}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {"metadata": meta, "status": {
        "phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}]}}


def test_a_cluster_is_healthy_when_its_head_and_workers_are_running_and_ready():
    assert cluster_health(READY_RC, 1, [pod("head"), pod("worker")]) == ClusterHealth.HEALTHY
    assert cluster_health(READY_RC, 0, [pod("head")]) == ClusterHealth.HEALTHY
    assert cluster_health(None, 1, []) == ClusterHealth.ABSENT
    deleting = {"metadata": {"name": "r", "deletionTimestamp": "2026-12-01T00:00:00Z"}}
    assert cluster_health(deleting, 1, [pod("head"), pod("worker")]) == ClusterHealth.DELETING


def test_the_pods_overrule_kuberays_ready_status():
    """KubeRay writes a pod's loss on a later pass: the pods say so first."""
    assert cluster_health(READY_RC, 1, []) == ClusterHealth.PROVISIONING
    assert cluster_health(READY_RC, 1, [pod("worker")]) == ClusterHealth.PROVISIONING
    assert cluster_health(READY_RC, 1, [pod("head", deleting=True), pod("worker")]) == (
        ClusterHealth.PROVISIONING)
    assert cluster_health(READY_RC, 1, [pod("head", ready=False)]) == ClusterHealth.PROVISIONING
    assert cluster_health(READY_RC, 2, [pod("head"), pod("worker")]) == (
        ClusterHealth.PROVISIONING)
    # A worker being deleted (drained, preempted) while KubeRay still counts it ready.
    assert cluster_health(READY_RC, 1, [pod("head"), pod("worker", deleting=True)]) == (
        ClusterHealth.PROVISIONING)
    assert cluster_health(READY_RC, 1, [pod("head"), pod("worker", ready=False)]) == (
        ClusterHealth.PROVISIONING)


def test_ready_pods_are_a_healthy_cluster_before_kuberay_writes_its_status():
    """KubeRay's status comes from the same pods on a later pass of its queue, seconds behind
    when many clusters come up at once."""
    assert cluster_health(NEW_RC, 1, [pod("head"), pod("worker")]) == ClusterHealth.HEALTHY
    assert cluster_health(NEW_RC, 1, [pod("head")]) == ClusterHealth.PROVISIONING
