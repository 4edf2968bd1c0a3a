"""The pod's cores, and the vLLM environment of an engine that takes turns with the learners."""

from __future__ import annotations

import os

from grpo_trainer import cores


def test_a_cpu_engine_runs_its_core_in_process_and_binds_tensor_parallel_workers_on_small_pods():
    assert cores.cpu_engine_env([0, 1], 1) == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    assert cores.cpu_engine_env(list(range(8)), 1) == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    # Workers of their own: a small pod's cores split between them, none held back.
    assert cores.cpu_engine_env([4, 5], 2) == {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_CPU_OMP_THREADS_BIND": "4|5", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    # Fewer cores than workers, or a bigger pod: vLLM's own binding.
    assert cores.cpu_engine_env([3], 2) == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    assert cores.cpu_engine_env([0, 1, 2, 3], 2) == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def test_a_pods_cores_are_its_affinity_cut_to_its_ray_nodes_cpus(monkeypatch):
    affinity = sorted(os.sched_getaffinity(0))
    monkeypatch.setattr(cores, "_ray_node_cpus", lambda: None)
    assert cores.pod_cores() == affinity  # outside Ray
    # A pod limited by CPU quota sees every core of the machine; its Ray node has its limit.
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(64)))
    monkeypatch.setattr(cores, "_ray_node_cpus", lambda: 2)
    assert cores.pod_cores() == [0, 1]
