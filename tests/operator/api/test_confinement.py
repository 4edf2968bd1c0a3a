"""The spec's confinement in the models: reserved env names, the per-run Secrets, GPUs only
through gpusPerWorker. The API server's side of the same rules: test_crd_server.py (the
INVALID table and the agreement property)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from grpo_operator.api.confinement import (
    RESERVED_ENV,
    RUN_SECRET_SUFFIXES,
    SIGNING_SECRET_SUFFIX,
    extra_resource_refused,
    reserved_env,
)
from grpo_operator.api.crd import build_crd
from grpo_operator.api.report import describe_validation_error
from grpo_operator.api.spec import validate_manifest
from grpo_operator.naming import ChildNames
from grpo_operator.settings import Settings
from tests.operator.api.manifests import base_manifest, set_path

R = "spec.resources"


def _refusal(manifest) -> str:
    with pytest.raises(ValidationError) as refused:
        validate_manifest(manifest)
    return describe_validation_error(refused.value)


@pytest.mark.parametrize("name", [
    "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ENABLE_K8S_TOKEN_AUTH", "RAY_ADDRESS", "RAY_PORT",
    "RAY_CLUSTER_NAME", "RAY_JOB_STOP_WAIT_TIME_S", "RAY_memory_monitor_refresh_ms",
    "KUBERAY_GEN_RAY_START_CMD", "FQ_RAY_IP", "GRPO_RUN_CONFIG", "GRPO_REPORT_KEY_PATH",
    "GRPO_DRIVER_METRICS_PORT", "GRPO_ANYTHING_LATER", "VLLM_RAY_BUNDLE_INDICES",
    "VLLM_RAY_PER_WORKER_GPUS", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
    "AMD_VISIBLE_DEVICES", "HABANA_VISIBLE_DEVICES", "HOME",
])
def test_names_the_trainer_ray_kuberay_or_the_runtime_own_are_refused(name):
    assert reserved_env(name) is not None
    message = _refusal(set_path(base_manifest(), f"{R}.env", [{"name": name, "value": "x"}]))
    assert message.startswith("spec.resources.env.0:") and "name is reserved" in message


@pytest.mark.parametrize("name", [
    "GRPO_TEST_DROP_WEIGHT", "VLLM_LOGGING_LEVEL", "VLLM_RAY_OTHER", "WANDB_PROJECT",
    "HF_HUB_OFFLINE", "NCCL_SOCKET_IFNAME", "CUDA_LAUNCH_BLOCKING", "MY_RAY_FLAG", "RAY",
    "GRPO", "ray_auth_mode", "XRAY_ADDRESS", "NVIDIA", "FQ_RAY_IP_2",
])
def test_other_names_stay_the_runs(name):
    assert reserved_env(name) is None
    spec = validate_manifest(set_path(base_manifest(), f"{R}.env",
                                      [{"name": name, "value": "x"}])).spec
    assert spec.resources.env[0].name == name


def test_every_reserved_family_says_why_and_the_crd_carries_each():
    crd = str(build_crd())
    for entry in RESERVED_ENV:
        assert entry.why and entry.owner
        assert (entry.prefix or entry.pattern) in crd


def test_the_suffixes_are_the_operators_secret_names():
    names = ChildNames("run")
    assert {names.auth_secret, names.report_key_secret} == {
        f"run{s}" for s in RUN_SECRET_SUFFIXES}
    assert Settings.signing_secret.endswith(SIGNING_SECRET_SUFFIX)


@pytest.mark.parametrize("path", ["env", "imagePullSecrets"])
@pytest.mark.parametrize("secret", ["other-ray-auth", "base-run-report-key", "x-ray-auth",
                                    "grpo-operator-report-signing", "team-report-signing"])
def test_the_operators_secrets_cannot_be_referenced_anywhere(path, secret):
    value = ([{"name": "T", "valueFrom": {"secretKeyRef": {"name": secret, "key": "k"}}}]
             if path == "env" else [{"name": secret}])
    message = _refusal(set_path(base_manifest(), f"{R}.{path}", value))
    assert "-ray-auth, -report-key or -report-signing are reserved" in message


def test_user_secrets_may_be_referenced():
    manifest = set_path(base_manifest(), f"{R}.env", [
        {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "k"}}},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "ray-auth-x", "key": "k"}}},
        {"name": "S3_KEY", "valueFrom": {"secretKeyRef": {"name": "report-signing-s3",
                                                          "key": "k"}}},
    ])
    manifest = set_path(manifest, f"{R}.imagePullSecrets", [{"name": "registry-report"}])
    resources = validate_manifest(manifest).spec.resources
    assert [e.value_from.secret_key_ref.name for e in resources.env] == [
        "wandb", "ray-auth-x", "report-signing-s3"]


def test_gpus_without_gpus_per_worker_are_refused():
    """The issue's case: GPUs requested through extraResources on a CPU run, never metered."""
    manifest = set_path(base_manifest(), f"{R}.gpusPerWorker", 0)
    manifest = set_path(manifest, f"{R}.extraResources", {"nvidia.com/gpu": 8})
    message = _refusal(manifest)
    assert message.startswith("spec.resources:") and "extraResources" in message


@pytest.mark.parametrize(("name", "refused"), [
    ("nvidia.com/gpu", True), ("amd.com/gpu", True), ("nvidia.com/gpu.shared", True),
    ("nvidia.com/mig-3g.40gb", True), ("gpu.intel.com/xe", True), ("cpu", True),
    ("memory", True), ("example.com/accel", True),  # the run's gpuResourceName below
    ("rdma/hca_shared_devices_a", False), ("hugepages-2Mi", False),
    ("ephemeral-storage", False), ("example.com/gpus", False), ("nvidia.com/hostdev", False),
])
def test_extra_resources_that_count_gpus_or_override_cpu_and_memory(name, refused):
    assert extra_resource_refused(name, "example.com/accel") is refused
    manifest = set_path(base_manifest(), f"{R}.gpuResourceName", "example.com/accel")
    manifest = set_path(manifest, f"{R}.extraResources", {name: 1})
    if refused:
        assert "extraResources" in _refusal(manifest)
    else:
        assert validate_manifest(manifest).spec.resources.extra_resources == {name: "1"}


@pytest.mark.parametrize("name", ["cpu", "memory", "gpu", "hugepages-2Mi"])
def test_the_gpu_resource_is_an_extended_resource(name):
    assert "gpuResourceName" in _refusal(set_path(base_manifest(), f"{R}.gpuResourceName",
                                                  name))
