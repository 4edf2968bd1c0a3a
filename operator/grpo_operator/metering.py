"""GPU time from pods, as the operator meters it for ``status.ledger.gpuSeconds``. Pure.

A pod holds its GPUs from the moment it runs until it stops; the operator samples the run's
RayCluster pods and adds, for each pod Running now, its GPUs times the time it has run since
the previous sample (or since it started, if later).
"""

from __future__ import annotations

import datetime
from typing import Any

from kubernetes.utils import parse_quantity


def pod_gpus(pod: dict[str, Any], resource_name: str) -> int:
    """The GPUs a pod holds: its containers' limits (requests equal limits for extended
    resources), plus the largest init container's."""
    spec = pod.get("spec") or {}

    def amount(container: dict[str, Any]) -> int:
        resources = container.get("resources") or {}
        value = (resources.get("limits") or {}).get(resource_name) or (
            resources.get("requests") or {}).get(resource_name)
        return int(parse_quantity(value)) if value is not None else 0

    main = sum(amount(c) for c in spec.get("containers") or [])
    init = max((amount(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def running_since(pod: dict[str, Any]) -> datetime.datetime | None:
    """When a Running pod started running (None: not running)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    started = [
        (cs.get("state") or {}).get("running", {}).get("startedAt")
        for cs in status.get("containerStatuses") or []
    ]
    stamps = [s for s in started if s] or ([status["startTime"]] if status.get("startTime")
                                           else [])
    if not stamps:
        return None
    return min(_timestamp(s) for s in stamps)


def _timestamp(value: Any) -> datetime.datetime:
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
    return datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def gpu_seconds_since(pods: list[dict[str, Any]], resource_name: str,
                      since: datetime.datetime | None, now: datetime.datetime) -> float:
    """GPU-seconds the Running ``pods`` used from ``since`` (each from its own start, if
    later) until ``now``."""
    total = 0.0
    for pod in pods:
        gpus = pod_gpus(pod, resource_name)
        started = running_since(pod) if gpus else None
        if started is None:
            continue
        begin = max(started, since) if since is not None else started
        total += gpus * max(0.0, (now - begin).total_seconds())
    return total
