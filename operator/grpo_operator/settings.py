"""The operator's settings, from its environment (the Helm chart sets them)."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from grpo_operator.acceptance import HOST_PATH_PREFIXES_ENV, Confinement, host_path_prefixes
from grpo_operator.leader import LeaseSettings
from grpo_operator.reconcile import Policy


@dataclass(frozen=True)
class Settings:
    workers: int = 4
    """Reconcile worker threads (runs are reconciled one at a time each)."""
    namespaces: tuple[str, ...] = ()
    """The namespaces served (WATCH_NAMESPACES, comma-separated); none: the whole cluster."""
    sweep_seconds: float = 300.0
    """How often the children's cache is checked against a listing (0: never)."""
    metrics_port: int = 0
    """Port of the Prometheus /metrics endpoint (0: not served)."""
    namespace: str = "grpo-system"
    """The operator's own namespace (where its signing Secret lives)."""
    signing_secret: str = "grpo-operator-report-signing"
    """The Secret (in ``namespace``) holding the key every run's report key derives from."""
    policy: Policy = field(default_factory=Policy)
    leader_election: LeaseSettings | None = None
    """The Lease that elects the one acting instance (None: this instance acts alone)."""


def _number(env: Mapping[str, str], name: str, default: float, cast: type = float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = cast(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None
    if value < 0:
        raise ValueError(f"{name}={raw!r} must not be negative")
    return value


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Settings from GRPO_* variables; a malformed one is an error naming it."""
    env = os.environ if env is None else env
    defaults = Policy()
    signing_secret = env.get("GRPO_SIGNING_SECRET", "").strip() or Settings.signing_secret
    namespace = env.get("GRPO_NAMESPACE", "").strip() or Settings.namespace
    election = None
    if env.get("GRPO_LEADER_ELECTION", "").strip().lower() in ("1", "true", "yes"):
        election = LeaseSettings(
            namespace=namespace,
            name=env.get("GRPO_LEASE_NAME", "").strip() or "grpo-operator-leader",
            # The pod's name (the chart sets it); a process elsewhere is told apart by its pid.
            identity=env.get("GRPO_IDENTITY", "").strip()
            or f"{socket.gethostname()}-{os.getpid()}",
            lease_seconds=_number(env, "GRPO_LEASE_SECONDS", LeaseSettings.lease_seconds),
        )
    return Settings(
        workers=max(1, int(_number(env, "GRPO_WORKERS", Settings.workers, int))),
        namespaces=tuple(n.strip() for n in env.get("WATCH_NAMESPACES", "").split(",")
                         if n.strip()),
        sweep_seconds=_number(env, "GRPO_SWEEP_SECONDS", Settings.sweep_seconds),
        metrics_port=int(_number(env, "GRPO_METRICS_PORT", 0, int)),
        namespace=namespace,
        signing_secret=signing_secret,
        leader_election=election,
        policy=Policy(
            cluster_unhealthy_seconds=_number(env, "GRPO_CLUSTER_UNHEALTHY_SECONDS",
                                              defaults.cluster_unhealthy_seconds),
            meter_interval_seconds=_number(env, "GRPO_METER_INTERVAL_SECONDS",
                                           defaults.meter_interval_seconds),
            meter_writes_per_second=_number(env, "GRPO_METER_WRITES_PER_SECOND",
                                            defaults.meter_writes_per_second),
            stop_slack_seconds=_number(env, "GRPO_STOP_SLACK_SECONDS",
                                       defaults.stop_slack_seconds),
            confinement=Confinement(
                host_path_prefixes=host_path_prefixes(env.get(HOST_PATH_PREFIXES_ENV, "")),
                reserved_secrets=(signing_secret,),
            ),
        ),
    )
