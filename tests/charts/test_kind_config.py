"""kind-config.yaml (which cannot run here: no Docker) marks its GPU pool exactly as the local
test cluster's fake GPU nodes are marked, so manifests that land on one land on the other."""

from __future__ import annotations

import yaml

from localcluster import nodes
from tests.operator.conftest import REPO


def _workers() -> dict[str, dict]:
    config = yaml.safe_load((REPO / "kind-config.yaml").read_text())
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert [n["role"] for n in config["nodes"]].count("control-plane") == 1
    return {n["labels"][nodes.GPU_POOL_LABEL]: n for n in config["nodes"] if n["role"] == "worker"}


def _taints(node: dict) -> list[dict]:
    patches = [yaml.safe_load(p) for p in node.get("kubeadmConfigPatches", [])]
    return [t for p in patches if p["kind"] == "JoinConfiguration"
            for t in p["nodeRegistration"]["taints"]]


def test_the_gpu_worker_is_labelled_and_tainted_like_the_fake_gpu_nodes():
    gpu = _workers()["gpu"]
    fake = nodes.gpu_node("gpu-0")
    for key in (nodes.GPU_POOL_LABEL, "nvidia.com/gpu.present"):
        assert gpu["labels"][key] == fake["metadata"]["labels"][key]
    assert _taints(gpu) == fake["spec"]["taints"] == [nodes.GPU_TAINT]
    mounts = {m["containerPath"]: m["hostPath"] for m in gpu["extraMounts"]}
    assert mounts["/var/run/nvidia-container-devices/all"] == "/dev/null"


def test_the_cpu_worker_takes_everything_else():
    """Untainted and without GPUs, like the fake cpu-0: the control plane keeps its taint."""
    cpu = _workers()["cpu"]
    assert _taints(cpu) == nodes.cpu_node("cpu-0")["spec"]["taints"] == []
    assert "nvidia.com/gpu.present" not in cpu["labels"]
    assert all(m["hostPath"] != "/dev/null" for m in cpu.get("extraMounts", []))
