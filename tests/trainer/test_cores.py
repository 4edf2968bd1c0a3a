"""The pod's cores, and the vLLM binding of an engine that takes turns with the learners."""

from __future__ import annotations

import os

from grpo_trainer import cores


def test_an_engine_binds_every_core_split_between_its_workers_and_holds_none_back():
    assert cores.engine_binding([0, 1], 1) == {
        "VLLM_CPU_OMP_THREADS_BIND": "0,1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    assert cores.engine_binding([4, 5, 6, 7, 8], 2)["VLLM_CPU_OMP_THREADS_BIND"] == "4,5|6,7"
    assert cores.engine_binding([3], 2) == {}  # fewer cores than workers: vLLM decides


def test_a_pods_cores_are_its_affinity_cut_to_its_ray_nodes_cpus(monkeypatch):
    affinity = sorted(os.sched_getaffinity(0))
    monkeypatch.setattr(cores, "_ray_node_cpus", lambda: None)
    assert cores.pod_cores() == affinity  # outside Ray
    # A pod limited by CPU quota sees every core of the machine; its Ray node has its limit.
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(64)))
    monkeypatch.setattr(cores, "_ray_node_cpus", lambda: 2)
    assert cores.pod_cores() == [0, 1]
