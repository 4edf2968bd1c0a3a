"""The CPU cores of the pod a Ray actor runs in: what the trainer's phases take in turn.

The trainer never generates while it updates (the engine generates, then the ranks update, then
the sync), so on the CPU each phase may use every core of the pod it runs on. The pod's
cores are those this process may run on (a cpuset, as the kubelet's static CPU manager gives a
Guaranteed pod), at most as many as its Ray node has CPUs: KubeRay starts a pod's node with its
container's CPU limit, and a pod limited by CFS quota rather than a cpuset still sees every core
of the machine.
"""

from __future__ import annotations

import os

BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
RESERVED_ENV = "VLLM_CPU_NUM_OF_RESERVED_CPU"
SMALL_POD_CORES = 2
"""Up to this many cores, the core vLLM holds back for its scheduler is half the pod or more."""


def pod_cores() -> list[int]:
    cores = sorted(os.sched_getaffinity(0))
    limit = _ray_node_cpus()
    return cores[:limit] if limit else cores


def _ray_node_cpus() -> int | None:
    """Whole CPUs of this process's Ray node (None outside Ray)."""
    import ray

    if not ray.is_initialized():
        return None
    node = ray.get_runtime_context().get_node_id()
    for entry in ray.nodes():
        if entry.get("NodeID") == node:
            return int(entry.get("Resources", {}).get("CPU", 0)) or None
    return None


def engine_binding(cores: list[int], tensor_parallel_size: int) -> dict[str, str]:
    """vLLM's CPU thread binding for an engine that has the pod to itself while it generates.

    vLLM's ``auto`` binds its workers' threads to one logical CPU per physical core and holds
    a core per worker back for its scheduler process, which busy-polls the workers. On a small
    pod that core is half the pod or more: there the engine takes every core, split evenly
    between its tensor-parallel workers. Measured on 2 cores (``make bench``'s models): the
    26.6M model generates 1.36× faster so, the 0.4M one, whose decoding is mostly scheduling,
    0.71× as fast — a model worth training is compute-bound. On bigger pods, and with fewer
    cores than workers, vLLM decides (empty)."""
    per_worker = len(cores) // tensor_parallel_size
    if len(cores) > SMALL_POD_CORES or per_worker == 0:
        return {}
    lists = [cores[i * per_worker:(i + 1) * per_worker] for i in range(tensor_parallel_size)]
    return {BIND_ENV: "|".join(",".join(map(str, c)) for c in lists), RESERVED_ENV: "0"}
