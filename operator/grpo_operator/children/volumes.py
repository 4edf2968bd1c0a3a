"""Volumes and mounts of the Ray and driver pods: inputs read-only, checkpoints writable, the
run config, a python reward's ConfigMap, a memory-backed /dev/shm (Ray's object store, vLLM and
NCCL need it), and /tmp."""

from __future__ import annotations

from typing import Any

from grpo_operator.api.checkpoint_layout import CHECKPOINT_MOUNT
from grpo_operator.api.inputs import REWARD_MOUNT, VolumeSource
from grpo_operator.api.ray_job import DRIVER_REPORT_KEY_DIR, DRIVER_TOKEN_DIR
from grpo_operator.api.run_config import DATA_MOUNT, MODEL_MOUNT, RUN_CONFIG_DIR
from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.naming import ChildNames


def _source(volume: VolumeSource, read_only: bool) -> dict[str, Any]:
    if volume.persistent_volume_claim is not None:
        claim = {"claimName": volume.persistent_volume_claim.claim_name}
        if read_only:
            claim["readOnly"] = True
        return {"persistentVolumeClaim": claim}
    assert volume.host_path is not None
    return {"hostPath": {"path": volume.host_path.path, "type": "Directory"}}


def input_volumes(spec: GRPORunSpec) -> list[dict[str, Any]]:
    return [
        {"name": "model", **_source(spec.model.volume, read_only=True)},
        {"name": "data", **_source(spec.dataset.volume, read_only=True)},
    ]


def input_mounts(spec: GRPORunSpec) -> list[dict[str, Any]]:
    model = {"name": "model", "mountPath": MODEL_MOUNT, "readOnly": True}
    if spec.model.path:
        model["subPath"] = spec.model.path
    return [model, {"name": "data", "mountPath": DATA_MOUNT, "readOnly": True}]


def reward_volumes(spec: GRPORunSpec) -> list[dict[str, Any]]:
    """A python reward's ConfigMap, only its key: the trainer runs on the head and scores in
    worker processes there, and nothing else of the ConfigMap is the run's to read."""
    python = spec.reward.python
    if python is None or python.config_map is None:
        return []
    return [{"name": "reward", "configMap": {
        "name": python.config_map, "items": [{"key": python.key, "path": python.key}]}}]


def reward_mounts(spec: GRPORunSpec) -> list[dict[str, Any]]:
    """At ``REWARD_MOUNT``, where ``RunPaths.reward_file`` points (``/reward/<key>``)."""
    if not reward_volumes(spec):
        return []
    return [{"name": "reward", "mountPath": REWARD_MOUNT, "readOnly": True}]


def run_config_volume(run_name: str) -> dict[str, Any]:
    return {"name": "run-config", "configMap": {"name": ChildNames(run_name).run_config_map}}


RUN_CONFIG_MOUNT = {"name": "run-config", "mountPath": RUN_CONFIG_DIR, "readOnly": True}

# The containers' root filesystem is read-only: what they must write goes to an emptyDir at
# /tmp — Ray's session directory and sockets, temporary files (the driver's job package), and
# the caches vLLM, torch and Hugging Face keep under the home, which HOME points into.
SCRATCH_DIR = "/tmp"
SCRATCH_VOLUME = {"name": "scratch", "emptyDir": {}}
SCRATCH_MOUNT = {"name": "scratch", "mountPath": SCRATCH_DIR}
SCRATCH_ENV = {"name": "HOME", "value": SCRATCH_DIR}


def ray_pod_volumes(spec: GRPORunSpec, run_name: str) -> list[dict[str, Any]]:
    return [
        *input_volumes(spec),
        {"name": "checkpoints", **_source(spec.checkpoint.volume, read_only=False)},
        run_config_volume(run_name),
        *reward_volumes(spec),
        # Counts against the container's memory limit.
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        SCRATCH_VOLUME,
    ]


def ray_pod_mounts(spec: GRPORunSpec) -> list[dict[str, Any]]:
    checkpoints = {"name": "checkpoints", "mountPath": CHECKPOINT_MOUNT}
    if spec.checkpoint.path:
        checkpoints["subPath"] = spec.checkpoint.path
    return [
        *input_mounts(spec),
        checkpoints,
        RUN_CONFIG_MOUNT,
        *reward_mounts(spec),
        {"name": "dshm", "mountPath": "/dev/shm"},
        SCRATCH_MOUNT,
    ]


def ray_auth_volume(run_name: str) -> dict[str, Any]:
    return {
        "name": "ray-auth",
        "secret": {"secretName": ChildNames(run_name).auth_secret, "defaultMode": 0o440},
    }


RAY_AUTH_MOUNT = {"name": "ray-auth", "mountPath": DRIVER_TOKEN_DIR, "readOnly": True}


def report_key_volume(run_name: str) -> dict[str, Any]:
    """The report key: the driver's alone (never a Ray pod's, see ``api.report``)."""
    return {
        "name": "report-key",
        "secret": {"secretName": ChildNames(run_name).report_key_secret, "defaultMode": 0o440},
    }


REPORT_KEY_MOUNT = {"name": "report-key", "mountPath": DRIVER_REPORT_KEY_DIR, "readOnly": True}
