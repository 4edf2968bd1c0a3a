"""Reading the children's state: the RayCluster's health and the driver Job's end. Pure.

Health comes from the cluster's pods, by KubeRay's own rule (the head and the workers Running
and Ready; a head or worker being deleted is not one to start an attempt on). KubeRay computes
its status from the same pods but writes it on a later pass of its one-at-a-time queue, seconds
behind when many clusters come up at once; and its ``status.state: ready`` is sticky (it never
goes back once reached), so it cannot tell a lost cluster.
Whether a cluster has ever been ready comes from KubeRay's RayClusterProvisioned condition,
which is set True once all pods are first ready and then never changes (a cluster that lost a
pod before KubeRay's pass saw them all ready counts as never ready: deadlines bound its wait).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class ClusterHealth(StrEnum):
    ABSENT = "Absent"
    PROVISIONING = "Provisioning"
    HEALTHY = "Healthy"
    DELETING = "Deleting"


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return None


def cluster_health(ray_cluster: dict[str, Any] | None, workers: int,
                   pods: list[dict[str, Any]]) -> ClusterHealth:
    """``pods``: the cluster's pods (those KubeRay controls for it)."""
    if ray_cluster is None:
        return ClusterHealth.ABSENT
    if ray_cluster["metadata"].get("deletionTimestamp"):
        return ClusterHealth.DELETING
    if any(_ready(p, "head") for p in pods) and sum(_ready(p, "worker") for p in pods) >= workers:
        return ClusterHealth.HEALTHY
    return ClusterHealth.PROVISIONING


def _ready(pod: dict[str, Any], node_type: str) -> bool:
    """A Ray pod of that type that is ready and not going away."""
    return (pod["metadata"].get("labels") or {}).get("ray.io/node-type") == node_type and (
        pod_ready(pod))


def pod_ready(pod: dict[str, Any]) -> bool:
    """Running, Ready and not being deleted (one being deleted, as in a node drain or a
    preemption, is not a node to start an attempt on)."""
    status = pod.get("status") or {}
    return (not pod["metadata"].get("deletionTimestamp") and status.get("phase") == "Running"
            and any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in status.get("conditions") or []))


def provisioned_at(ray_cluster: dict[str, Any] | None) -> datetime.datetime | None:
    """When the cluster's pods were all ready for the first time; None if never (yet)."""
    provisioned = _condition(ray_cluster or {}, "RayClusterProvisioned")
    if not (provisioned and provisioned.get("status") == "True"):
        return None
    when = provisioned.get("lastTransitionTime")
    if not when:
        return None
    return datetime.datetime.fromisoformat(str(when).replace("Z", "+00:00"))


@dataclass(frozen=True)
class DriverEnd:
    """How a driver Job ended. ``exit_code`` is None when the pod vanished without one."""

    succeeded: bool
    exit_code: int | None
    message: str
    disruption: str | None = None
    """Why the cluster took the driver pod away (a drain's eviction, preemption, a tainted
    node), as the Job's podFailurePolicy or the pod's DisruptionTarget condition says."""


def driver_end(job: dict[str, Any], pods: list[dict[str, Any]]) -> DriverEnd | None:
    """None while the Job runs. A failed Job whose pod left no exit code (deleted, its node
    lost) ends with ``exit_code`` None: a vanished driver."""
    complete = _condition(job, "Complete")
    failed = _condition(job, "Failed")
    if complete and complete.get("status") == "True":
        return DriverEnd(True, 0, "the driver finished")
    if not (failed and failed.get("status") == "True"):
        return None
    message = failed.get("message") or ""
    disruption = disruption_of(pods)
    if disruption is None and failed.get("reason") == "PodFailurePolicy" and (
            "condition DisruptionTarget" in message):
        disruption = message
    code = exit_code(pods)
    if code is not None:
        return DriverEnd(False, code, message, disruption)
    return DriverEnd(False, None, message or "the driver pod vanished", disruption)


def exit_code(pods: list[dict[str, Any]]) -> int | None:
    """The exit code of the first terminated container among the pods (the kubelet's word)."""
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (cs.get("state") or {}).get("terminated")
            if terminated and terminated.get("exitCode") is not None:
                return int(terminated["exitCode"])
    return None


def disruption_of(pods: list[dict[str, Any]]) -> str | None:
    """Why the cluster disrupted one of the pods (its DisruptionTarget condition, set by the
    eviction API, the scheduler's preemption, the taint manager or the kubelet), or None."""
    for pod in pods:
        condition = _condition(pod, "DisruptionTarget")
        if condition and condition.get("status") == "True":
            return ": ".join(filter(None, (condition.get("reason"), condition.get("message"))))
    return None


# Waiting reasons the kubelet gives a container that will not start by itself soon.
_STUCK_WAITING = frozenset({
    "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
    "CreateContainerError", "CrashLoopBackOff", "RunContainerError",
})


def pod_problem(pods: list[dict[str, Any]]) -> str | None:
    """Why one of the pods does not start, as the scheduler or the kubelet says (unschedulable,
    an image that does not pull, a missing Secret or ConfigMap, a crash loop), or None."""
    for pod in pods:
        name = (pod.get("metadata") or {}).get("name", "?")
        scheduled = _condition(pod, "PodScheduled")
        if scheduled and scheduled.get("status") == "False" and (
                scheduled.get("reason") == "Unschedulable"):
            return f"pod {name} is unschedulable: {scheduled.get('message', '')}".strip(": ")
        status = pod.get("status") or {}
        for cs in (status.get("initContainerStatuses") or []) + (
                status.get("containerStatuses") or []):
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in _STUCK_WAITING:
                return (f"pod {name} container {cs.get('name')}: {waiting['reason']}: "
                        f"{waiting.get('message', '')}").strip(": ")
    return None
