"""Spec sections naming data: volumes, the frozen model and dataset, the reward, checkpoints."""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import Field

from grpo_operator.api.base import (
    AbsolutePath,
    ApiModel,
    DNSSubdomain,
    ParquetPath,
    RelativePath,
    Rule,
    Sha256,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
)


class PersistentVolumeClaimSource(ApiModel):
    """A PersistentVolumeClaim in the run's namespace."""

    claim_name: DNSSubdomain
    """Name of the PersistentVolumeClaim. The head, the workers and the driver may run on
    different nodes: the model and dataset claims need the ReadOnlyMany or ReadWriteMany access
    mode, the checkpoint claim ReadWriteMany (checked when the run is accepted)."""


class HostPathSource(ApiModel):
    """A directory on the node. For local clusters and demos only: each node sees its own."""

    path: AbsolutePath
    """Absolute directory on the node."""


class VolumeSource(ApiModel):
    """Where data lives: a small subset of core/v1 VolumeSource, exactly one member set.

    emptyDir is deliberately absent: checkpoints on it vanish with the pod, and a run could
    not resume from them.
    """

    persistent_volume_claim: PersistentVolumeClaimSource | None = None
    """A PersistentVolumeClaim (the usual choice)."""
    host_path: HostPathSource | None = None
    """A directory on the node (local clusters and demos)."""

    RULES = (
        Rule(
            cel="has(self.persistentVolumeClaim) != has(self.hostPath)",
            message="exactly one of persistentVolumeClaim or hostPath must be set",
            check=lambda v: (v.persistent_volume_claim is None) != (v.host_path is None),
        ),
    )


class ModelSource(ApiModel):
    """The base model: a Hugging Face directory (config, tokenizer, safetensors). Frozen."""

    volume: VolumeSource
    """The volume holding the model; mounted read-only at /model."""
    path: RelativePath | None = None
    """Directory of the model inside the volume (mounted as the volume's subPath); unset: the
    volume's root."""
    sha256: Sha256 | None = None
    """sha256 of the model directory's digest manifest (`python -m grpo_trainer digest DIR`).
    When set, the trainer refuses to start on any other content; either way it records the
    digest at start and fails the run if the model changes during the run."""


class DatasetSource(ApiModel):
    """The dataset: parquet files in verl's layout (`prompt`, `reward_model.ground_truth`,
    `data_source`). Frozen."""

    volume: VolumeSource
    """The volume holding the files; mounted read-only at /data."""
    train_file: ParquetPath
    """Training split, a parquet file relative to the volume's root."""
    validation_file: ParquetPath | None = None
    """Validation split, a parquet file relative to the volume's root; must differ from
    trainFile."""
    sha256: Sha256 | None = None
    """sha256 of the digest manifest of the train and validation files (paths relative to the
    volume's root)."""

    RULES = (
        Rule(
            cel="!has(self.validationFile) || self.validationFile != self.trainFile",
            message="validationFile must differ from trainFile",
            check=lambda d: d.validation_file != d.train_file,
            field_path=".validationFile",
        ),
    )


class RewardName(StrEnum):
    """A built-in verifiable reward, or one of the user's own (`python`, `http`)."""

    GSM8K = "gsm8k"
    MATH_BOXED = "math_boxed"
    EXACT_MATCH = "exact_match"
    REGEX = "regex"
    PYTHON = "python"
    HTTP = "http"


REWARD_MOUNT = "/reward"
"""Where a python reward's ConfigMap is mounted (read-only) in the Ray pods."""
_CONFIG_MAP_KEY = r"^[-._a-zA-Z0-9]+$"
_PYTHON_IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"
_HTTP_URL = r"^https?://[^\s/$.?#][^\s]*$"


class PythonRewardSource(ApiModel):
    """The user's reward function: `function(completion, ground_truth, extra) -> float`, in a
    Python file from a ConfigMap or on the dataset volume. `extra` is a dict with the row's
    `data_source`. It runs in worker processes beside the trainer, each call bounded by
    reward.timeoutSeconds: a call that raises, times out or returns anything but a finite
    number scores 0 and is counted in the step's figures. The file is a frozen input: its
    digest is recorded by the first attempt and must not change."""

    config_map: DNSSubdomain | None = None
    """A ConfigMap in the run's namespace holding the file under `key`; mounted read-only into
    the Ray pods at /reward."""
    key: StrictStr = Field(default="reward.py", min_length=1, max_length=253,
                           pattern=_CONFIG_MAP_KEY)
    """The ConfigMap's key holding the file."""
    path: RelativePath | None = None
    """Or: the file on the dataset volume, relative to its root."""
    function: StrictStr = Field(default="score", min_length=1, max_length=128,
                                pattern=_PYTHON_IDENTIFIER)
    """The function's name in the file."""
    sha256: Sha256 | None = None
    """sha256 of the file's digest manifest (`python -m grpo_trainer digest DIR FILE`): when set,
    the trainer refuses to start on any other file."""

    RULES = (
        Rule(
            cel="has(self.configMap) != has(self.path)",
            message="exactly one of configMap or path must be set",
            check=lambda p: (p.config_map is None) != (p.path is None),
        ),
    )

    def file_path(self, data_mount: str) -> str:
        """Where the trainer finds the file in the Ray pods."""
        if self.config_map is not None:
            return f"{REWARD_MOUNT}/{self.key}"
        return f"{data_mount}/{self.path}"


class HttpRewardEndpoint(ApiModel):
    """A remote verifier (an in-cluster reward server): the trainer POSTs
    `{"items": [{"completion", "groundTruth", "dataSource"}, ...]}` and reads
    `{"scores": [float, ...]}`, one score per item, in order. A request that fails (connection,
    HTTP status >= 500 or 429, timeout) is retried with exponential backoff; what still fails,
    and any item whose score is not a finite number, scores 0 and is counted."""

    url: StrictStr = Field(min_length=1, max_length=2048, pattern=_HTTP_URL)
    """The endpoint, http:// or https://."""
    batch_size: StrictInt = Field(default=16, ge=1, le=4096)
    """Items per request."""
    max_retries: StrictInt = Field(default=3, ge=0, le=10)
    """Retries of a failed request (backoff 0.5 s, doubling)."""


_GROUP_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


def _regex_has_group(reward: RewardSpec) -> bool:
    if reward.pattern is None:
        return True
    group = reward.group or "answer"
    try:
        compiled = re.compile(reward.pattern)
    except re.error:
        return False
    return group in compiled.groupindex and f"(?P<{group}>" in reward.pattern


class RewardSpec(ApiModel):
    """The reward: a built-in verifiable reward and its options. Frozen.

    Options other than `name` are passed to the trainer's reward factory as they are (camelCase
    keys); unset options take the reward's defaults.
    """

    name: RewardName
    """`gsm8k` (the number after `####`, or the last number), `math_boxed` (the last
    `\\boxed{...}`, normalised), `exact_match` (the whole response), `regex` (a named group of
    `pattern`), `python` (your function, see `python`), `http` (your server, see `http`)."""
    case_sensitive: StrictBool | None = None
    """exact_match only: compare case-sensitively (the reward's default: true)."""
    strip: StrictBool | None = None
    """exact_match only: strip surrounding whitespace before comparing (default: true)."""
    pattern: StrictStr | None = Field(default=None, min_length=1, max_length=1024)
    """regex only, required there: a Python regular expression with the named group `group`,
    written `(?P<name>...)`, searched in the response; the group's text is compared with the
    ground truth. The API server checks that the group is there; a pattern that Python cannot
    compile is refused when the operator accepts the run (Accepted=False)."""
    group: StrictStr | None = Field(default=None, max_length=64, pattern=_GROUP_NAME)
    """regex only: the named group holding the answer (default: `answer`)."""
    python: PythonRewardSource | None = None
    """python only, required there: the file and function."""
    http: HttpRewardEndpoint | None = None
    """http only, required there: the endpoint."""
    timeout_seconds: StrictFloat | None = Field(default=None, gt=0, le=3600)
    """python and http only: the bound on one call (python) or one request (http); default
    10."""
    concurrency: StrictInt | None = Field(default=None, ge=1, le=256)
    """python and http only: worker processes (python) or requests in flight (http); default
    4."""

    RULES = (
        Rule(
            cel="(self.name == 'python') == has(self.python)",
            message="python is required for the python reward and allowed only there",
            check=lambda r: (r.name == RewardName.PYTHON) == (r.python is not None),
            field_path=".python",
        ),
        Rule(
            cel="(self.name == 'http') == has(self.http)",
            message="http is required for the http reward and allowed only there",
            check=lambda r: (r.name == RewardName.HTTP) == (r.http is not None),
            field_path=".http",
        ),
        Rule(
            cel="self.name in ['python', 'http'] || "
            "(!has(self.timeoutSeconds) && !has(self.concurrency))",
            message="timeoutSeconds and concurrency are allowed only for the python and http "
            "rewards",
            check=lambda r: r.name in (RewardName.PYTHON, RewardName.HTTP)
            or (r.timeout_seconds is None and r.concurrency is None),
        ),
        Rule(
            cel="self.name == 'regex' ? has(self.pattern) : !has(self.pattern)",
            message="pattern is required for the regex reward and allowed only there",
            check=lambda r: (r.name == RewardName.REGEX) == (r.pattern is not None),
            field_path=".pattern",
        ),
        Rule(
            cel="self.name == 'regex' || !has(self.group)",
            message="group is allowed only for the regex reward",
            check=lambda r: r.name == RewardName.REGEX or r.group is None,
            field_path=".group",
        ),
        Rule(
            cel="self.name == 'exact_match' || (!has(self.caseSensitive) && !has(self.strip))",
            message="caseSensitive and strip are allowed only for the exact_match reward",
            check=lambda r: (
                r.name == RewardName.EXACT_MATCH or (r.case_sensitive is None and r.strip is None)
            ),
        ),
        Rule(
            cel=(
                "!has(self.pattern) || self.pattern.contains("
                "'(?P<' + (has(self.group) ? self.group : 'answer') + '>')"
            ),
            message="pattern must contain the named group given by group (default answer), "
            "written (?P<name>...), and must compile",
            check=_regex_has_group,
            field_path=".pattern",
        ),
    )

    def options(self) -> dict[str, object]:
        """The reward's options as the trainer's reward factory takes them (camelCase keys)."""
        return self.model_dump(by_alias=True, exclude_none=True, exclude={"name"}, mode="json")


class CheckpointSpec(ApiModel):
    """Where and how often the trainer checkpoints."""

    volume: VolumeSource
    """A writable volume, mounted at /checkpoints. The run writes under `<run-uid>/`, so a
    recreated run with the same name never resumes someone else's state. Frozen."""
    path: RelativePath | None = None
    """Directory inside the volume (mounted as the volume's subPath); unset: the volume's root.
    Frozen."""
    interval_steps: StrictInt = Field(default=10, ge=1, le=100_000)
    """Checkpoint every this many optimizer steps (and always at the end, on suspend and when a
    budget stops the run)."""
    keep: StrictInt = Field(default=2, ge=1, le=1000)
    """How many step checkpoints to keep (the newest)."""
