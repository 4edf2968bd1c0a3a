"""The run's NetworkPolicy: its Ray pods (head and workers) accept connections only from each
other and from the run's own driver, and the driver only on the head's Jobs API port.

A second guard besides Ray's token authentication: a pod of another run, or of another
namespace, cannot reach any port of the run's Ray nodes (GCS, raylets, object managers, worker
processes, dashboard). Egress is left alone: the trainer reads models and data from wherever
the run points it.

Selectors, in the run's namespace:

- the Ray pods: ``ray.io/cluster=<RayCluster>`` (KubeRay's label, the one the operator finds
  them by) and ``grpo.dev/role`` in (ray-head, ray-worker) (the operator's pod templates);
- the driver: ``grpo.dev/run=<run>`` and ``grpo.dev/role=driver`` (the driver Job's template),
  whatever the attempt.

Neither names the run's UID: the Ray pods do not carry it, and names are what every child is
found by. Nothing else needs in: KubeRay reads a RayCluster's pods through the API server; the
probes KubeRay gives Ray pods (HTTP on the dashboard agent's port) come from the kubelet on the
pod's own node, which NetworkPolicy always lets in; ``kubectl port-forward`` connects from
inside the pod. Prometheus is let in only through ``MetricsScrapers``, from the namespaces and
pods it names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grpo_operator.api.constants import (
    LABEL_ROLE,
    LABEL_RUN,
    ROLE_DRIVER,
    ROLE_RAY_HEAD,
    ROLE_RAY_WORKER,
)
from grpo_operator.api.ray_job import DASHBOARD_PORT
from grpo_operator.children.meta import RunRef, child_metadata
from grpo_operator.naming import ChildNames

RAY_CLUSTER_LABEL = "ray.io/cluster"
RAY_METRICS_PORT = 8080
"""KubeRay's default metrics export port on every Ray node (the containers' ``metrics`` port)."""


@dataclass(frozen=True)
class MetricsScrapers:
    """The pods allowed to scrape the Ray nodes' metrics port: those matching ``pod_labels``
    in the namespaces matching ``namespace_labels`` (both required, so that an empty setting
    cannot admit every pod of every namespace)."""

    namespace_labels: Mapping[str, str]
    pod_labels: Mapping[str, str]

    def __post_init__(self) -> None:
        if not self.namespace_labels or not self.pod_labels:
            raise ValueError("metrics scrapers need both namespace labels and pod labels")


def ray_pods_selector(run: RunRef) -> dict[str, Any]:
    return {
        "matchLabels": {RAY_CLUSTER_LABEL: ChildNames(run.name).ray_cluster},
        "matchExpressions": [
            {"key": LABEL_ROLE, "operator": "In", "values": [ROLE_RAY_HEAD, ROLE_RAY_WORKER]}
        ],
    }


def driver_selector(run: RunRef) -> dict[str, Any]:
    return {"matchLabels": {LABEL_RUN: run.name, LABEL_ROLE: ROLE_DRIVER}}


def network_policy(run: RunRef, metrics_scrapers: MetricsScrapers | None = None) -> dict[str, Any]:
    ray_pods = ray_pods_selector(run)
    ingress: list[dict[str, Any]] = [
        # Ray nodes talk to each other on ports Ray picks at start-up (worker ports included).
        {"from": [{"podSelector": ray_pods}]},
        # Only the head serves the Jobs API; a worker has nothing on that port.
        {
            "from": [{"podSelector": driver_selector(run)}],
            "ports": [{"protocol": "TCP", "port": DASHBOARD_PORT}],
        },
    ]
    if metrics_scrapers is not None:
        ingress.append({
            "from": [{
                "namespaceSelector": {"matchLabels": dict(metrics_scrapers.namespace_labels)},
                "podSelector": {"matchLabels": dict(metrics_scrapers.pod_labels)},
            }],
            "ports": [{"protocol": "TCP", "port": RAY_METRICS_PORT}],
        })
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": child_metadata(run, ChildNames(run.name).network_policy, "network-policy"),
        "spec": {
            "podSelector": ray_pods,
            # Ingress only: listing Egress would cut the pods off from everything not allowed.
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }
