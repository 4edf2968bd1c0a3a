"""The real KubeRay operator reconciles RayClusters onto KWOK's fake GPU nodes, and its status
carries the health signals the operator relies on (head ready, ready workers)."""

from __future__ import annotations

import pytest
from kubernetes import client, watch

from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def raycluster(name: str, gpus_per_worker: int, replicas: int) -> dict:
    def container(kind: str, gpus: int) -> dict:
        limits = {"cpu": "1", "memory": "1Gi"}
        if gpus:
            limits["nvidia.com/gpu"] = str(gpus)
        return {"name": f"ray-{kind}", "image": "rayproject/ray:2.60.0",
                "resources": {"limits": limits, "requests": limits}}

    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name},
        "spec": {
            "rayVersion": "2.60.0",
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {"spec": {"containers": [container("head", 0)]}},
            },
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": replicas,
                    "minReplicas": replicas,
                    "maxReplicas": replicas,
                    "rayStartParams": {},
                    "template": {
                        "spec": {
                            "nodeSelector": {"grpo.dev/node-pool": "gpu"},
                            "tolerations": [GPU_TOLERATION],
                            "containers": [container("worker", gpus_per_worker)],
                        }
                    },
                }
            ],
        },
    }


def _condition(rc: dict, kind: str) -> str | None:
    for c in (rc.get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return c["status"]
    return None


def _get(custom: client.CustomObjectsApi, ns: str, name: str) -> dict:
    return custom.get_namespaced_custom_object("ray.io", "v1", ns, "rayclusters", name)


def test_raycluster_workers_land_on_gpu_nodes_and_report_ready(k8s_api, namespace):
    custom = client.CustomObjectsApi(k8s_api)
    core = client.CoreV1Api(k8s_api)
    custom.create_namespaced_custom_object(
        "ray.io", "v1", namespace, "rayclusters", raycluster("rc", 4, 2)
    )

    def healthy():
        rc = _get(custom, namespace, "rc")
        status = rc.get("status") or {}
        ok = _condition(rc, "HeadPodReady") == "True" and status.get("readyWorkerReplicas") == 2
        return rc if ok else None

    rc = wait_for(healthy, 90, what="head ready and 2 ready workers")
    assert rc["status"]["desiredGPU"] == "8"

    pods = core.list_namespaced_pod(namespace, label_selector="ray.io/cluster=rc").items
    workers = [p for p in pods if p.metadata.labels.get("ray.io/node-type") == "worker"]
    heads = [p for p in pods if p.metadata.labels.get("ray.io/node-type") == "head"]
    assert len(workers) == 2 and len(heads) == 1
    assert all(p.status.phase == "Running" for p in pods)
    nodes = {n.metadata.name: n for n in core.list_node().items}
    for worker in workers:
        assert nodes[worker.spec.node_name].metadata.labels["grpo.dev/node-pool"] == "gpu"
    # The head asks for no GPU and does not tolerate the GPU taint.
    assert nodes[heads[0].spec.node_name].metadata.labels["grpo.dev/node-pool"] == "cpu"


def test_workers_that_fit_no_node_stay_pending_and_never_count_ready(k8s_api, namespace):
    custom = client.CustomObjectsApi(k8s_api)
    core = client.CoreV1Api(k8s_api)
    custom.create_namespaced_custom_object(
        "ray.io", "v1", namespace, "rayclusters", raycluster("big", 16, 1)
    )
    wait_for(lambda: _condition(_get(custom, namespace, "big"), "HeadPodReady") == "True", 90,
             what="head ready")

    def unschedulable_worker():
        pods = core.list_namespaced_pod(
            namespace, label_selector="ray.io/cluster=big,ray.io/node-type=worker"
        ).items
        return [
            p for p in pods
            if any(c.type == "PodScheduled" and c.status == "False"
                   and c.reason == "Unschedulable" for c in p.status.conditions or [])
        ]

    pending = wait_for(unschedulable_worker, 60, what="an unschedulable worker pod")
    assert pending[0].status.phase == "Pending"
    assert "nvidia.com/gpu" in pending[0].status.conditions[0].message or any(
        "nvidia.com/gpu" in (c.message or "") for c in pending[0].status.conditions
    )
    rc = _get(custom, namespace, "big")
    assert (rc["status"].get("readyWorkerReplicas") or 0) == 0


def test_deleting_the_head_pod_shows_in_status(k8s_api, namespace):
    custom = client.CustomObjectsApi(k8s_api)
    core = client.CoreV1Api(k8s_api)
    custom.create_namespaced_custom_object(
        "ray.io", "v1", namespace, "rayclusters", raycluster("lose", 1, 1)
    )
    rc = wait_for(
        lambda: (r := _get(custom, namespace, "lose"))
        and _condition(r, "HeadPodReady") == "True" and r,
        90, what="head ready",
    )
    head = core.list_namespaced_pod(
        namespace, label_selector="ray.io/cluster=lose,ray.io/node-type=head"
    ).items[0]

    stream = watch.Watch()
    seen_not_ready = False
    core.delete_namespaced_pod(head.metadata.name, namespace)
    for event in stream.stream(
        custom.list_namespaced_custom_object, "ray.io", "v1", namespace, "rayclusters",
        field_selector="metadata.name=lose",
        resource_version=rc["metadata"]["resourceVersion"], timeout_seconds=60,
    ):
        if _condition(event["object"], "HeadPodReady") == "False":
            seen_not_ready = True
            stream.stop()
    assert seen_not_ready, "the RayCluster never reported its head not ready"
