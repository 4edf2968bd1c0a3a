"""Labels, ownerReferences and pod hardening shared by every child.

Children carry labels of our own and never the GRPORun's labels or annotations: Argo CD's
tracking label copied onto a child would make Argo CD prune it as an orphan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grpo_operator.api.constants import (
    API_VERSION,
    KIND,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    LABEL_RUN,
    LABEL_RUN_UID,
    MANAGED_BY,
)


@dataclass(frozen=True)
class RunRef:
    """The parent GRPORun, as far as its children need to know it."""

    name: str
    namespace: str
    uid: str


def run_labels(run: RunRef, component: str) -> dict[str, str]:
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        "app.kubernetes.io/name": "grpo-operator",
        "app.kubernetes.io/instance": run.name,
        LABEL_RUN: run.name,
        LABEL_RUN_UID: run.uid,
        LABEL_COMPONENT: component,
    }


def owner_reference(run: RunRef) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": run.name,
        "uid": run.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def child_metadata(
    run: RunRef, name: str, component: str, extra_labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": run.namespace,
        "labels": {**run_labels(run, component), **(extra_labels or {})},
        "ownerReferences": [owner_reference(run)],
    }


# Non-root with a fixed uid/gid: the trainer image runs as uid 1000 (Ray's images do too).
RUN_AS_USER = 1000


def pod_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_USER,
        "fsGroup": RUN_AS_USER,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,  # writes go to the pod's volumes (children.volumes)
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
