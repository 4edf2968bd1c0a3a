"""A RayCluster's health from KubeRay's status and, when the pass has them, its pods."""

from __future__ import annotations

from grpo_operator.health import ClusterHealth, cluster_health

READY_RC = {"metadata": {"name": "r"}, "status": {
    "state": "ready", "readyWorkerReplicas": 1,
    "conditions": [{"type": "HeadPodReady", "status": "True"}]}}


def pod(node_type: str, *, ready: bool = True, deleting: bool = False) -> dict:
    meta = {"name": f"r-{node_type}", "labels": {"ray.io/node-type": node_type}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {"metadata": meta, "status": {
        "phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}]}}


def test_kuberays_ready_status_is_healthy_only_with_ready_pods_when_pods_are_read():
    assert cluster_health(READY_RC, 1) == ClusterHealth.HEALTHY  # pods not read
    assert cluster_health(READY_RC, 1, [pod("head"), pod("worker")]) == ClusterHealth.HEALTHY
    # KubeRay has not written the head's loss yet: its pods say so first.
    assert cluster_health(READY_RC, 1, [pod("worker")]) == ClusterHealth.PROVISIONING
    assert cluster_health(READY_RC, 1, [pod("head", deleting=True), pod("worker")]) == (
        ClusterHealth.PROVISIONING)
    assert cluster_health(READY_RC, 1, [pod("head", ready=False)]) == ClusterHealth.PROVISIONING
    assert cluster_health(READY_RC, 2, [pod("head")]) == ClusterHealth.PROVISIONING
    # A worker being deleted (drained, preempted) while KubeRay still counts it ready.
    assert cluster_health(READY_RC, 1, [pod("head"), pod("worker", deleting=True)]) == (
        ClusterHealth.PROVISIONING)
    assert cluster_health(READY_RC, 1, [pod("head"), pod("worker", ready=False)]) == (
        ClusterHealth.PROVISIONING)
