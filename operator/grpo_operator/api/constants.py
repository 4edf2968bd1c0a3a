"""Names shared by the operator, the trainer, the CRD and the docs.

Everything that appears on the wire (API group, label and annotation keys, condition types,
phases, reasons) is spelled once here.
"""

from __future__ import annotations

from enum import StrEnum

# --- The resource -------------------------------------------------------------------------------

GROUP = "grpo.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "GRPORun"
LIST_KIND = "GRPORunList"
PLURAL = "grporuns"
SINGULAR = "grporun"
SHORT_NAMES: tuple[str, ...] = ("grpo",)
CATEGORIES: tuple[str, ...] = ("grpo",)
CRD_NAME = f"{PLURAL}.{GROUP}"

# --- Names --------------------------------------------------------------------------------------
#
# A GRPORun's name is at most MAX_RUN_NAME_LENGTH characters and a DNS-1035 label (it becomes
# the RayCluster's name, and KubeRay requires DNS-1035 there because Services are named after
# it). The limit keeps every derived name whole and within 63 characters; NAME_BUDGET is the
# arithmetic (rendered into docs/api.md, checked by tests).
MAX_RUN_NAME_LENGTH = 40
DNS1035_LABEL_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
MAX_ATTEMPT = 9999
MAX_WORKER_GROUP_NAME_LENGTH = 9
MAX_CHILD_SUFFIX_LENGTH = 22

# (derived name, its length as a function of the run name's length n, its limit, why)
NAME_BUDGET: tuple[tuple[str, str, int, int, str], ...] = (
    (
        "label values `grpo.dev/run`, `ray.io/cluster`",
        "n",
        MAX_RUN_NAME_LENGTH,
        63,
        "label values are at most 63 characters",
    ),
    (
        "RayCluster `<run>`",
        "n",
        MAX_RUN_NAME_LENGTH,
        53,
        "KubeRay refuses longer RayCluster names (63 - len('-serve-svc'))",
    ),
    (
        "head Service `<run>-head-svc`",
        "n + 9",
        MAX_RUN_NAME_LENGTH + 9,
        50,
        "KubeRay cuts Service names longer than 50 characters",
    ),
    (
        "worker pods `<run>-<group>-worker-xxxxx`",
        "n + 1 + 9 + 8 + 5",
        MAX_RUN_NAME_LENGTH + 1 + MAX_WORKER_GROUP_NAME_LENGTH + 8 + 5,
        63,
        "KubeRay cuts the `<run>-<group>` prefix at 50; worker group names are at most 9",
    ),
    (
        "driver Job `<run>-a<attempt>`",
        "n + 2 + 4",
        MAX_RUN_NAME_LENGTH + 6,
        63,
        "Job names become a label value; attempts are at most 9999",
    ),
    (
        "driver pods `<run>-a<attempt>-xxxxx`",
        "n + 6 + 6",
        MAX_RUN_NAME_LENGTH + 12,
        63,
        "pod names within 63 keep the pod's hostname equal to its name",
    ),
    (
        "per-run objects `<run>-<suffix>`",
        "n + 1 + 22",
        MAX_RUN_NAME_LENGTH + 1 + MAX_CHILD_SUFFIX_LENGTH,
        63,
        "ConfigMaps, ServiceAccount, Role, Secret with suffixes of at most 22 characters",
    ),
)

# --- Labels and annotations ---------------------------------------------------------------------

LABEL_RUN = f"{GROUP}/run"  # the GRPORun's name, on every child
LABEL_RUN_UID = f"{GROUP}/run-uid"  # the GRPORun's UID, on every child
LABEL_ATTEMPT = f"{GROUP}/attempt"  # the attempt number, on per-attempt children (driver Job)
LABEL_COMPONENT = f"{GROUP}/component"  # e.g. "raycluster", "driver", "report", "run-config"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "grpo-operator"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1")  # Kueue 0.15+ serves v1beta2; older ones v1beta1
KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # Kueue's, on a Workload: its job's UID
# What a pod is for: the driver, or a Ray pod of the run's RayCluster (NetworkPolicies and node
# agents select on it; the local cluster plays the kubelet of exactly these pods).
LABEL_ROLE = f"{GROUP}/role"
ROLE_DRIVER = "driver"
ROLE_RAY_HEAD = "ray-head"
ROLE_RAY_WORKER = "ray-worker"

# An explicit retry after a terminal failure: `grpo.dev/retry: <operation-id>`. Each id is
# acted on once; the ids seen are kept (bounded) in status.seenRetryIds.
ANNOTATION_RETRY = f"{GROUP}/retry"

# kopf persistence, pinned (its defaults changed across releases).
KOPF_ANNOTATIONS_PREFIX = GROUP
FINALIZER = f"{GROUP}/finalizer"

# --- Status vocabulary --------------------------------------------------------------------------


class Phase(StrEnum):
    """The one-word summary of a run, shown by `kubectl get grpo`."""

    PENDING = "Pending"
    ACCEPTED = "Accepted"
    QUEUED = "Queued"
    PROVISIONING = "Provisioning"
    RUNNING = "Running"
    RECOVERING = "Recovering"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_PHASES


TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED})


class ConditionType(StrEnum):
    """Condition types in status.conditions (metav1.Condition shape).

    `Accepted`, not "Admitted": Kueue users read "Admitted" as Kueue's admission.
    """

    ACCEPTED = "Accepted"
    CLUSTER_READY = "ClusterReady"
    RUNNING = "Running"
    RECOVERING = "Recovering"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STALLED = "Stalled"
    """True when the run ended Failed or Cancelled (or was refused), and while the operator
    cannot make progress on it (an API error, a child name held by someone else, a status or
    spec it cannot read; it retries with backoff)."""
    RECONCILING = "Reconciling"
    """True while the run works toward its end (accepted, queued, provisioning, running,
    recovering); False once it is suspended or ended, or while Stalled."""
    READY = "Ready"
    """True once the run Succeeded."""


class TrainerActivity(StrEnum):
    """What the trainer is busy with, stepping or not (status.progress.activity)."""

    VERIFYING_INPUTS = "VerifyingInputs"
    """Hashing the frozen model and dataset (at the start, and before the artifact)."""
    RESTORING_CHECKPOINT = "RestoringCheckpoint"
    """Verifying and loading the newest checkpoint and the rollout journal."""
    STARTING_ENGINES = "StartingEngines"
    """Placing the learners and rollout engines and loading the model into them."""
    TRAINING = "Training"
    """Stepping: generate, reward, learn, sync."""
    CHECKPOINTING = "Checkpointing"
    """Writing and verifying a checkpoint."""
    SEALING_ARTIFACT = "SealingArtifact"
    """Copying the final model out and writing its digest."""


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Outcome(StrEnum):
    """How a run ended (status.terminal.outcome and the trainer's terminal report)."""

    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"


class Reason(StrEnum):
    """Machine-readable reasons (CamelCase) for terminal states, exits and conditions."""

    COMPLETED = "Completed"
    INVALID_INPUT = "InvalidInput"
    FROZEN_INPUT_CHANGED = "FrozenInputChanged"
    BUDGET_EXHAUSTED = "BudgetExhausted"
    SUSPENDED = "Suspended"
    RETRYABLE_FAILURE = "RetryableFailure"
    WEIGHT_SYNC_INCOMPLETE = "WeightSyncIncomplete"
    WEIGHT_SYNC_MISMATCH = "WeightSyncMismatch"
    UNEXPECTED_EXIT = "UnexpectedExit"
    KILLED = "Killed"
    POD_VANISHED = "PodVanished"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    PRE_RUNNING_DEADLINE_EXCEEDED = "PreRunningDeadlineExceeded"
    CLUSTER_UNHEALTHY = "ClusterUnhealthy"
    PREEMPTED = "Preempted"
    RESUMED = "Resumed"
    RETRY = "Retry"
    MAX_RESTARTS_EXCEEDED = "MaxRestartsExceeded"
    CANCELLED = "Cancelled"
    REPORT_REJECTED = "ReportRejected"
    REPORT_NOT_WRITTEN = "ReportNotWritten"
    DISRUPTED = "Disrupted"
    POD_NOT_STARTING = "PodNotStarting"
    INCOMPATIBLE_TRAINER = "IncompatibleTrainer"
