"""The pod's cores, and the vLLM binding of an engine that takes turns with the learners."""

from __future__ import annotations

import os

from grpo_trainer import cores


def test_on_a_small_pod_an_engine_binds_every_core_split_between_its_workers():
    assert cores.engine_binding([0, 1], 1) == {
        "VLLM_CPU_OMP_THREADS_BIND": "0,1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    assert cores.engine_binding([4, 5], 2)["VLLM_CPU_OMP_THREADS_BIND"] == "4|5"
    assert cores.engine_binding([3], 2) == {}  # fewer cores than workers: vLLM decides
    # A bigger pod: vLLM's own binding (one CPU per physical core, a core for its scheduler).
    assert cores.engine_binding([0, 1, 2, 3], 1) == {}


def test_a_pods_cores_are_its_affinity_cut_to_its_ray_nodes_cpus(monkeypatch):
    affinity = sorted(os.sched_getaffinity(0))
    monkeypatch.setattr(cores, "_ray_node_cpus", lambda: None)
    assert cores.pod_cores() == affinity  # outside Ray
    # A pod limited by CPU quota sees every core of the machine; its Ray node has its limit.
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(64)))
    monkeypatch.setattr(cores, "_ray_node_cpus", lambda: 2)
    assert cores.pod_cores() == [0, 1]
