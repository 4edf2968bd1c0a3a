"""The fake nodes of the local cluster: a GPU node pool and a CPU node, managed by KWOK.

GPU nodes are labelled and tainted the way GPU clusters mark their accelerator pools (NVIDIA's
GPU feature discovery labels, the ``nvidia.com/gpu`` NoSchedule taint that managed clusters put
on GPU pools), so that only pods asking for GPUs and tolerating the taint land there.
"""

from __future__ import annotations

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_POOL_LABEL = "grpo.dev/node-pool"
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}


def _node(name: str, labels: dict[str, str], capacity: dict[str, str], taints: list[dict]):
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **labels,
            },
        },
        "spec": {"taints": taints},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def gpu_node(name: str, gpus: int = 8) -> dict:
    return _node(
        name,
        {
            GPU_POOL_LABEL: "gpu",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.count": str(gpus),
        },
        {"cpu": "96", "memory": "1024Gi", "pods": "110", "ephemeral-storage": "2Ti",
         GPU_RESOURCE: str(gpus)},
        [GPU_TAINT],
    )


# The kubelet's default pod limit: what bounds how many driver pods a CPU node takes.
CPU_NODE_PODS = 110


def cpu_node(name: str) -> dict:
    return _node(
        name,
        {GPU_POOL_LABEL: "cpu"},
        {"cpu": "32", "memory": "128Gi", "pods": str(CPU_NODE_PODS), "ephemeral-storage": "500Gi"},
        [],
    )


def default_nodes(gpu_nodes: int = 2, cpu_nodes: int = 1) -> list[dict]:
    return ([gpu_node(f"gpu-{i}") for i in range(gpu_nodes)]
            + [cpu_node(f"cpu-{i}") for i in range(cpu_nodes)])


def cpu_nodes_for(drivers: int) -> int:
    """CPU nodes enough for ``drivers`` driver pods at once (a bench's batch): with fewer, the
    ones beyond the pod limit are unschedulable, and the operator rightly warns of each."""
    return max(1, -(-drivers // CPU_NODE_PODS))
