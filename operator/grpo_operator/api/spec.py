"""`GRPORun.spec`: the run's inputs, settings and policies, with the rules between sections.

Frozen after creation: model, dataset, reward, the algorithm except maxSteps (which may only be
raised), the checkpoint volume and path, and runPolicy.queueName. The immutability rules sit on
`spec` itself and compare whole sections with `oldSelf`, so removing an optional frozen field is
refused too (a rule on the optional field would not run once it is gone).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from grpo_operator.api.base import (
    DNS1123_SUBDOMAIN_PATTERN,
    ApiModel,
    Rule,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    TransitionRule,
)
from grpo_operator.api.constants import (
    API_VERSION,
    DNS1035_LABEL_PATTERN,
    KIND,
    MAX_RUN_NAME_LENGTH,
)
from grpo_operator.api.inputs import CheckpointSpec, DatasetSource, ModelSource, RewardSpec
from grpo_operator.api.resources import ResourcesSpec
from grpo_operator.api.training import AlgorithmSpec, LearnerSpec, RolloutSpec


class BudgetSpec(ApiModel):
    """Limits on what the run may spend. Editable at any time."""

    max_generated_tokens: StrictInt | None = Field(default=None, ge=1, le=10**15)
    """Completion tokens the whole run may generate (all attempts)."""
    max_gpu_hours: StrictFloat | None = Field(default=None, gt=0, le=10**7, alias="maxGPUHours")
    """GPU-hours the run may use, metered by the operator from the GPU pods' Running time
    (provisioning and recovery count). When reached, the trainer is stopped with a checkpoint
    and the run fails with BudgetExhausted. Editable."""
    stop_at_limit: StrictBool = False
    """false: the worst case of the whole plan must fit the budget at acceptance (an aggregate
    admission). true: at least one full step must fit; the trainer stops at the limit with a
    checkpoint and reason BudgetExhausted."""
    active_deadline_seconds: StrictInt | None = Field(default=None, ge=1, le=31_536_000)
    """Wall-clock limit counted from when the RayCluster was first ready, over all attempts
    (restarts do not reset it), time Suspended excluded. When it passes, the trainer is stopped
    with a checkpoint and the run fails with DeadlineExceeded. Editable."""
    pre_running_deadline_seconds: StrictInt | None = Field(default=None, ge=1, le=31_536_000)
    """Limit on the time until the RayCluster is first ready, counted from Kueue's admission
    (or from the run's creation without a queue), time Suspended excluded; the run fails with
    PreRunningDeadlineExceeded. Editable."""


class RecoveryGranularity(StrEnum):
    """What is generated again when a rollout attempt fails."""

    SIBLING = "sibling"
    PROMPT_GROUP = "promptGroup"


class RunPolicySpec(ApiModel):
    """Lifecycle controls."""

    max_restarts: StrictInt = Field(default=3, ge=0, le=1000)
    """Retryable failures tolerated before the run fails with MaxRestartsExceeded. Editable."""
    recovery_granularity: RecoveryGranularity = RecoveryGranularity.SIBLING
    """`sibling`: regenerate only the failed completions of a group; `promptGroup`: the whole
    group. Editable (applies from the next attempt)."""
    suspend: StrictBool = False
    """true: checkpoint, stop the trainer and delete the RayCluster; false again resumes from
    the checkpoint. Editable."""
    cancel: StrictBool = False
    """true: end the run as Cancelled, keeping its ledger and checkpoints. Cannot be undone."""
    queue_name: StrictStr | None = Field(
        default=None, min_length=1, max_length=63, pattern=DNS1123_SUBDOMAIN_PATTERN
    )
    """Kueue LocalQueue; passed to the RayCluster as label kueue.x-k8s.io/queue-name. Frozen."""
    ttl_seconds_after_finished: StrictInt | None = Field(default=None, ge=0, le=31_536_000)
    """Delete the GRPORun this long after it finished. Leave unset under GitOps: Argo CD's
    self-heal would recreate the run and train again. Editable."""


def _optional_equal(path: str) -> str:
    """CEL: the optional field at `path` (below self/oldSelf) is unchanged, removal included."""
    return (
        f"has(self.{path}) == has(oldSelf.{path}) && "
        f"(!has(self.{path}) || self.{path} == oldSelf.{path})"
    )


def _frozen_algorithm_rules() -> tuple[TransitionRule, ...]:
    rules = []
    for name, field in AlgorithmSpec.model_fields.items():
        if name == "max_steps":
            continue
        alias = field.alias or name
        path = f"algorithm.{alias}"
        optional = not field.is_required() and field.default is None
        rules.append(
            TransitionRule(
                cel=_optional_equal(path) if optional else f"self.{path} == oldSelf.{path}",
                message=f"{path} is immutable",
                check=lambda old, new, n=name: (
                    getattr(old.algorithm, n) == getattr(new.algorithm, n)
                ),
                field_path=f".{path}",
                frozen=(path,),
            )
        )
    return tuple(rules)


def _whole(section: str, attr: str) -> TransitionRule:
    return TransitionRule(
        cel=f"self.{section} == oldSelf.{section}",
        message=f"{section} is immutable",
        check=lambda old, new: getattr(old, attr) == getattr(new, attr),
        field_path=f".{section}",
        frozen=(section,),
    )


class GRPORunSpec(ApiModel):
    """What to train, on what, with which settings, and within which limits."""

    model: ModelSource
    """The base model. Frozen."""
    dataset: DatasetSource
    """The training (and validation) data. Frozen."""
    reward: RewardSpec
    """The verifiable reward. Frozen."""
    algorithm: AlgorithmSpec
    """GRPO settings. Frozen, except maxSteps (may be raised)."""
    learner: LearnerSpec = Field(default_factory=LearnerSpec)
    """The learner's compute dtype and memory (dtype frozen)."""
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    """The rollout engine."""
    resources: ResourcesSpec
    """Image, workers, GPUs, pod placement."""
    checkpoint: CheckpointSpec
    """Checkpoint volume and cadence."""
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    """Spending limits."""
    run_policy: RunPolicySpec = Field(default_factory=RunPolicySpec)
    """Restarts, suspend, cancel, queue, TTL."""

    model_config = ConfigDict(protected_namespaces=())

    RULES = (
        Rule(
            cel="self.resources.gpusPerWorker == 0 || "
            "self.resources.gpusPerWorker % self.rollout.tensorParallelSize == 0",
            message="rollout.tensorParallelSize must divide resources.gpusPerWorker",
            check=lambda s: (
                s.resources.gpus_per_worker == 0
                or s.resources.gpus_per_worker % s.rollout.tensor_parallel_size == 0
            ),
            field_path=".rollout.tensorParallelSize",
        ),
        Rule(
            cel="(!has(self.algorithm.evalIntervalSteps) && !has(self.algorithm.evalMaxPrompts)"
            ") || has(self.dataset.validationFile)",
            message="algorithm.evalIntervalSteps and algorithm.evalMaxPrompts need "
            "dataset.validationFile",
            check=lambda s: (
                (s.algorithm.eval_interval_steps is None and s.algorithm.eval_max_prompts is None)
                or s.dataset.validation_file is not None
            ),
            field_path=".algorithm.evalIntervalSteps",
        ),
        Rule(
            cel="!has(self.rollout.maxModelLen) || self.rollout.maxModelLen >= "
            "self.algorithm.maxPromptTokens + self.algorithm.maxResponseTokens",
            message="rollout.maxModelLen must be at least "
            "algorithm.maxPromptTokens + algorithm.maxResponseTokens",
            check=lambda s: (
                s.rollout.max_model_len is None
                or s.rollout.max_model_len
                >= s.algorithm.max_prompt_tokens + s.algorithm.max_response_tokens
            ),
            field_path=".rollout.maxModelLen",
        ),
    )

    TRANSITION_RULES = (
        _whole("model", "model"),
        _whole("dataset", "dataset"),
        _whole("reward", "reward"),
        *_frozen_algorithm_rules(),
        TransitionRule(
            cel="self.learner.dtype == oldSelf.learner.dtype",
            message="learner.dtype is immutable",
            check=lambda old, new: old.learner.dtype == new.learner.dtype,
            field_path=".learner.dtype",
            frozen=("learner.dtype",),
        ),
        TransitionRule(
            cel="self.algorithm.maxSteps >= oldSelf.algorithm.maxSteps",
            message="algorithm.maxSteps may only be raised",
            check=lambda old, new: new.algorithm.max_steps >= old.algorithm.max_steps,
            field_path=".algorithm.maxSteps",
            raise_only=("algorithm.maxSteps",),
        ),
        TransitionRule(
            cel="self.checkpoint.volume == oldSelf.checkpoint.volume",
            message="checkpoint.volume is immutable",
            check=lambda old, new: old.checkpoint.volume == new.checkpoint.volume,
            field_path=".checkpoint.volume",
            frozen=("checkpoint.volume",),
        ),
        TransitionRule(
            cel=_optional_equal("checkpoint.path"),
            message="checkpoint.path is immutable",
            check=lambda old, new: old.checkpoint.path == new.checkpoint.path,
            field_path=".checkpoint.path",
            frozen=("checkpoint.path",),
        ),
        TransitionRule(
            cel=_optional_equal("runPolicy.queueName"),
            message="runPolicy.queueName is immutable",
            check=lambda old, new: old.run_policy.queue_name == new.run_policy.queue_name,
            field_path=".runPolicy.queueName",
            frozen=("runPolicy.queueName",),
        ),
        TransitionRule(
            cel="!oldSelf.runPolicy.cancel || self.runPolicy.cancel",
            message="runPolicy.cancel cannot be undone",
            check=lambda old, new: not old.run_policy.cancel or new.run_policy.cancel,
            field_path=".runPolicy.cancel",
            one_way=("runPolicy.cancel",),
        ),
    )


def validate_spec_update(old: GRPORunSpec, new: GRPORunSpec) -> list[str]:
    """The messages of the transition rules an update from `old` to `new` breaks (empty: ok).

    The API server enforces the same rules; the operator uses this to explain a refused edit
    and tests use it to show both sides agree.
    """
    return [rule.message for rule in GRPORunSpec.TRANSITION_RULES if not rule.check(old, new)]


class ObjectMeta(BaseModel):
    """The part of metadata the API reads; the rest is the API server's business."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


def _name_ok(run: GRPORun) -> bool:
    return run.metadata.name is None or len(run.metadata.name) <= MAX_RUN_NAME_LENGTH


def _name_shape_ok(run: GRPORun) -> bool:
    name = run.metadata.name
    return name is None or re.fullmatch(DNS1035_LABEL_PATTERN[1:-1], name) is not None


class GRPORun(ApiModel):
    """A whole GRPORun object, as read from the API server or a manifest."""

    api_version: Literal["grpo.dev/v1alpha1"] = API_VERSION  # type: ignore[assignment]
    kind: Literal["GRPORun"] = KIND  # type: ignore[assignment]
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: GRPORunSpec
    status: dict[str, Any] | None = None
    """Read with `grpo_operator.api.status.GRPORunStatus`; not validated with the spec, so a
    manifest is judged on its spec alone."""

    model_config = ConfigDict(protected_namespaces=())

    RULES = (
        Rule(
            cel=f"self.metadata.name.size() <= {MAX_RUN_NAME_LENGTH}",
            message=f"metadata.name must be at most {MAX_RUN_NAME_LENGTH} characters "
            "(it names the RayCluster, the driver Jobs and their pods)",
            check=_name_ok,
        ),
        Rule(
            cel=f"self.metadata.name.matches('{DNS1035_LABEL_PATTERN}')",
            message="metadata.name must be a DNS-1035 label (lowercase letters, digits and '-', "
            "starting with a letter), as KubeRay requires of RayCluster names",
            check=_name_shape_ok,
        ),
    )


def validate_manifest(manifest: dict[str, Any]) -> GRPORun:
    """Parse a GRPORun manifest the way the API server judges it (raises ValidationError)."""
    return GRPORun.model_validate(manifest)
