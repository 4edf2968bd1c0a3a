"""The run config: everything the trainer needs to know about its run, in one file.

The operator writes it as JSON under RUN_CONFIG_KEY of the run-config ConfigMap, mounted at
RUN_CONFIG_DIR in the driver and the Ray pods; the trainer reads RUN_CONFIG_PATH (or the path in
the RUN_CONFIG_ENV environment variable, for runs outside a pod). The attempt and the resume
mode change between attempts, so the operator rewrites the ConfigMap before creating each
attempt's driver Job. The driver's pod is new for every attempt and sees the current content;
pods that already mount the ConfigMap (long-lived Ray pods) see an update only after the
kubelet's next sync (up to about a minute), so the current config travels with the submission.

In-pod paths: the model directory is /model (the model volume mounted read-only with
model.path as subPath), the dataset volume is /data (read-only), the checkpoint volume is
/checkpoints and the run's own directory is /checkpoints/<run-uid>/.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, field_serializer

from grpo_operator.api.base import ApiModel, StrictStr, schema_version_type
from grpo_operator.api.checkpoint_layout import CHECKPOINT_MOUNT, CheckpointLayout
from grpo_operator.api.contract import (
    CONTRACT_VERSION,
    ContractVersionText,
    image_refuses,
    peek_version,
)
from grpo_operator.api.report import REPORT_KEY, describe_validation_error
from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.api.status import Attempt, InPodPath, InputDigests

RUN_CONFIG_SCHEMA_VERSION = 1
RUN_CONFIG_KEY = "run-config.json"
RUN_CONFIG_DIR = "/etc/grpo"
RUN_CONFIG_PATH = f"{RUN_CONFIG_DIR}/{RUN_CONFIG_KEY}"
RUN_CONFIG_ENV = "GRPO_RUN_CONFIG"
MODEL_MOUNT = "/model"
DATA_MOUNT = "/data"
RunConfigSchemaVersion = schema_version_type(RUN_CONFIG_SCHEMA_VERSION)

Name = Annotated[StrictStr, Field(min_length=1, max_length=253)]


class RunConfigError(ValueError):
    """An unreadable or invalid run config (the trainer exits with INVALID_INPUT)."""


class IncompatibleContractError(RunConfigError):
    """A run config this image cannot run (``api.contract``; the trainer exits with
    INCOMPATIBLE_CONTRACT)."""


class ResumeMode(StrEnum):
    """How the trainer starts."""

    NONE = "none"
    """Start at step 0 (the first attempt)."""
    LATEST = "latest"
    """Resume from the newest checkpoint whose manifest verifies; start at step 0 if there is
    none (later attempts, resume after suspend)."""


class RunIdentity(ApiModel):
    """The GRPORun this config belongs to."""

    name: Name
    namespace: Name
    uid: StrictStr = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9-]*$")


class RunPaths(ApiModel):
    """In-pod paths of the inputs and outputs."""

    model_dir: InPodPath
    """The model directory (/model)."""
    data_dir: InPodPath
    """The dataset volume (/data)."""
    train_file: InPodPath
    """/data/<dataset.trainFile>."""
    validation_file: InPodPath | None = None
    """/data/<dataset.validationFile>, when set."""
    checkpoint_dir: InPodPath
    """The run's checkpoint directory, /checkpoints/<run-uid>."""
    reward_file: InPodPath | None = None
    """A python reward's file: /reward/<key> (its ConfigMap) or /data/<path>."""


class RunConfig(ApiModel):
    """The trainer's whole configuration for one attempt (schemaVersion 1)."""

    schema_version: RunConfigSchemaVersion = RUN_CONFIG_SCHEMA_VERSION
    """Always 1 in this version."""
    contract_version: ContractVersionText = str(CONTRACT_VERSION)
    """The contract version of the operator that wrote it (``api.contract``); absent: 1.0."""
    run: RunIdentity
    """Name, namespace and UID of the GRPORun."""
    attempt: Attempt
    """The attempt number; reports carry it."""
    resume: ResumeMode
    """How to start."""
    paths: RunPaths
    """In-pod paths."""
    report_config_map: Name
    """The ConfigMap (in run.namespace) whose REPORT_KEY the trainer replaces with its report."""
    report_key: Literal["report.json"] = REPORT_KEY
    """The key holding the report."""
    spec: GRPORunSpec
    """The GRPORun's spec as of this attempt, without the fields left at their defaults (an
    older image parses it as long as the run uses nothing newer than the image)."""
    inputs: InputDigests | None = None
    """The frozen inputs' digests an earlier attempt found (status.recovery.inputs): this
    attempt must find the same. Unset until an attempt has reported them."""

    @classmethod
    def build(
        cls,
        *,
        spec: GRPORunSpec,
        name: str,
        namespace: str,
        uid: str,
        attempt: int,
        resume: ResumeMode,
        report_config_map: str,
        inputs: InputDigests | None = None,
    ) -> RunConfig:
        """The run config of one attempt, with the standard in-pod paths."""
        return cls(
            run=RunIdentity(name=name, namespace=namespace, uid=uid),
            attempt=attempt,
            resume=resume,
            paths=standard_paths(spec, uid),
            report_config_map=report_config_map,
            spec=spec,
            inputs=inputs,
        )

    @field_serializer("spec")
    def _spec_without_defaults(self, spec: GRPORunSpec):
        return spec.model_dump(mode="json", by_alias=True, exclude_none=True,
                               exclude_defaults=True)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True)

    @classmethod
    def from_json(cls, data: str | bytes) -> RunConfig:
        """Parse strictly; RunConfigError names the offending fields, IncompatibleContractError
        says when the config is of a contract this image cannot run."""
        problem = None
        try:
            config = cls.model_validate_json(data)
        except ValidationError as exc:
            problem = describe_validation_error(exc)
        try:
            version = peek_version(data)
        except ValueError:  # not JSON, or a malformed version: strict parsing says which
            version = None
        refusal = None if version is None else image_refuses(version, problem=problem)
        if refusal is not None:
            raise IncompatibleContractError(refusal)
        if problem is not None:
            raise RunConfigError(problem)
        return config


    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None) -> RunConfig:
        """Read the run config from `path`, $GRPO_RUN_CONFIG, or RUN_CONFIG_PATH."""
        target = Path(path or os.environ.get(RUN_CONFIG_ENV) or RUN_CONFIG_PATH)
        try:
            data = target.read_bytes()
        except OSError as exc:
            raise RunConfigError(f"cannot read the run config {target}: {exc}") from None
        return cls.from_json(data)


def standard_paths(spec: GRPORunSpec, uid: str) -> RunPaths:
    """The in-pod paths for a spec and run UID."""
    validation = spec.dataset.validation_file
    return RunPaths(
        model_dir=MODEL_MOUNT,
        data_dir=DATA_MOUNT,
        train_file=f"{DATA_MOUNT}/{spec.dataset.train_file}",
        validation_file=f"{DATA_MOUNT}/{validation}" if validation else None,
        checkpoint_dir=str(CheckpointLayout.for_run(uid, CHECKPOINT_MOUNT).root),
        reward_file=spec.reward.python.file_path(DATA_MOUNT) if spec.reward.python else None,
    )
