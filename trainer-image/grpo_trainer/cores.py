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
INPROCESS_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"
THREADS_ENV = "OMP_NUM_THREADS"
VLLM_CPU_SETTINGS = (BIND_ENV, RESERVED_ENV, INPROCESS_ENV)
"""Set in a pod's env (``resources.env``), any of them leaves how vLLM uses the cores to it."""
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


def cpu_engine_env(cores: list[int], tensor_parallel_size: int) -> dict[str, str]:
    """vLLM's environment for a CPU engine that has the pod to itself while it generates.

    An engine of one worker runs vLLM's engine core, and so the model, in the engine's own
    process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) on one torch thread per core of the pod
    (``OMP_NUM_THREADS``, which vLLM also reads to leave the threads alone): in a process of
    its own the engine core busy-polls its worker and talks to the front end over a socket at
    every decoding step, which on a CPU takes a core from the model and adds a round trip per
    token. Measured on 2 cores, standalone engine (``make bench``'s models): the 0.4M model
    decodes 4,690 tok/s in-process against 3,627 in processes of its own, the 26.6M model 738
    against 598. The workers of a tensor-parallel engine are processes of their own, bound by
    vLLM: on a small pod every core split evenly between them (vLLM's ``auto`` would hold a core
    per worker back for the engine core), on bigger pods, or with fewer cores than workers, as
    vLLM decides (empty)."""
    if tensor_parallel_size == 1:
        return {INPROCESS_ENV: "0", THREADS_ENV: str(len(cores))}
    per_worker = len(cores) // tensor_parallel_size
    if len(cores) > SMALL_POD_CORES or per_worker == 0:
        return {}
    lists = [cores[i * per_worker:(i + 1) * per_worker] for i in range(tensor_parallel_size)]
    return {BIND_ENV: "|".join(",".join(map(str, c)) for c in lists), RESERVED_ENV: "0"}
