"""The pod's cores, and the vLLM environment of an engine that takes turns with the learners."""

from __future__ import annotations

import os

from grpo_trainer import cores


def test_a_cpu_engine_of_one_worker_runs_in_process_on_every_core_of_its_pod():
    assert cores.cpu_engine_env([0, 1], 1) == {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "2"}
    assert cores.cpu_engine_env(list(range(8)), 1)["OMP_NUM_THREADS"] == "8"


def test_tensor_parallel_workers_split_a_small_pods_cores_and_bind_as_vllm_says_elsewhere():
    assert cores.cpu_engine_env([4, 5], 2) == {
        "VLLM_CPU_OMP_THREADS_BIND": "4|5", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    assert cores.cpu_engine_env([3], 2) == {}  # fewer cores than workers
    assert cores.cpu_engine_env([0, 1, 2, 3], 2) == {}  # a bigger pod


def test_a_pods_cores_are_its_affinity_cut_to_its_ray_nodes_cpus(monkeypatch):
    affinity = sorted(os.sched_getaffinity(0))
    monkeypatch.setattr(cores, "_ray_node_cpus", lambda: None)
    assert cores.pod_cores() == affinity  # outside Ray
    # A pod limited by CPU quota sees every core of the machine; its Ray node has its limit.
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(64)))
    monkeypatch.setattr(cores, "_ray_node_cpus", lambda: 2)
    assert cores.pod_cores() == [0, 1]
