"""The operator's Prometheus metrics: runs by phase, reconcile errors and pass durations,
restarts, the time from creation to the cluster being ready and to the trainer's first report,
GPU-seconds and what is left of each run's budget.

Runs by phase come from the last status the operator recorded for each run it serves, so
they are right once every run has been reconciled after a start (kopf lists them all).
"""

from __future__ import annotations

import datetime
import threading
from collections import Counter as Tally
from collections.abc import Iterator
from typing import NamedTuple

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from grpo_operator.api.constants import ConditionType, Phase
from grpo_operator.api.status import GRPORunStatus

Key = tuple[str, str]  # (namespace, name)
# Seconds: from a warm pool (seconds) to a queue wait of hours.
WAIT_BUCKETS = (5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
# Seconds: a pass is a few API round trips (milliseconds), slow ones wait out API timeouts.
PASS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class _Figures(NamedTuple):
    """What the metrics show of a run's last recorded status (the status itself, a few dozen
    objects, is not kept: with a thousand runs it would be most of the process's memory)."""

    phase: str
    gpu_seconds: float
    gpu_seconds_left: float | None
    tokens_left: int | None

    @classmethod
    def of(cls, status: GRPORunStatus) -> _Figures:
        left = status.ledger.budget_remaining
        return cls(str(status.phase or Phase.PENDING), status.ledger.gpu_seconds,
                   None if left is None or left.gpu_hours is None else left.gpu_hours * 3600,
                   None if left is None else left.generated_tokens)


class _RunsCollector(Collector):
    def __init__(self, lock: threading.Lock, runs: dict[Key, _Figures]):
        self._lock = lock
        self._runs = runs

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            statuses = list(self._runs.items())
        by_phase = GaugeMetricFamily("grpo_runs", "GRPORuns served, by phase", labels=["phase"])
        tally = Tally(s.phase for _, s in statuses)
        for phase in Phase:
            by_phase.add_metric([str(phase)], tally.get(str(phase), 0))
        yield by_phase
        gpu = GaugeMetricFamily("grpo_run_gpu_seconds",
                                "GPU-seconds metered for a run (status.ledger.gpuSeconds)",
                                labels=["namespace", "name"])
        for (namespace, name), s in statuses:
            gpu.add_metric([namespace, name], s.gpu_seconds)
        yield gpu
        gpu_left = GaugeMetricFamily(
            "grpo_run_budget_remaining_gpu_seconds", "GPU-seconds left of a run's "
            "budget.maxGPUHours (negative when overspent; runs without that limit have none)",
            labels=["namespace", "name"])
        tokens_left = GaugeMetricFamily(
            "grpo_run_budget_remaining_tokens", "Generated tokens left of a run's "
            "budget.maxGeneratedTokens (negative when overspent; runs without that limit have "
            "none)", labels=["namespace", "name"])
        for (namespace, name), s in statuses:
            if s.gpu_seconds_left is not None:
                gpu_left.add_metric([namespace, name], s.gpu_seconds_left)
            if s.tokens_left is not None:
                tokens_left.add_metric([namespace, name], s.tokens_left)
        yield gpu_left
        yield tokens_left


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._lock = threading.Lock()
        self._runs: dict[Key, _Figures] = {}
        self.registry.register(_RunsCollector(self._lock, self._runs))
        self.reconcile_errors = Counter(
            "grpo_reconcile_errors_total", "Reconcile passes that raised",
            registry=self.registry)
        self.reconcile_duration = Histogram(
            "grpo_reconcile_duration_seconds", "Duration of reconcile passes, failed ones "
            "included", buckets=PASS_BUCKETS, registry=self.registry)
        self.restarts = Counter(
            "grpo_run_restarts_total", "Attempts started after a retryable failure or a lost "
            "cluster", registry=self.registry)
        self.to_cluster_ready = Histogram(
            "grpo_run_time_to_cluster_ready_seconds",
            "From a run's creation to its RayCluster first being ready",
            buckets=WAIT_BUCKETS, registry=self.registry)
        self.to_running = Histogram(
            "grpo_run_time_to_running_seconds",
            "From a run's creation to the trainer's first report (the trainer is up)",
            buckets=WAIT_BUCKETS, registry=self.registry)

    def serve(self, port: int) -> None:
        start_http_server(port, registry=self.registry)

    def record(self, key: Key, old: GRPORunStatus, new: GRPORunStatus,
               created: datetime.datetime | None) -> None:
        """Account one recorded status change of a run."""
        figures = _Figures.of(new)
        with self._lock:
            self._runs[key] = figures
        if new.recovery.restarts > old.recovery.restarts:
            self.restarts.inc(new.recovery.restarts - old.recovery.restarts)
        if created is None:
            return
        ready = new.condition(ConditionType.CLUSTER_READY)
        if old.active_since is None and new.active_since is not None and ready is not None:
            self.to_cluster_ready.observe(_since(created, ready.last_transition_time))
        if old.accepted_report is None and new.accepted_report is not None:
            self.to_running.observe(_since(created, new.ledger.last_report_time))

    def forget(self, key: Key) -> None:
        with self._lock:
            self._runs.pop(key, None)


def _since(created: datetime.datetime, then: datetime.datetime | None) -> float:
    return max(0.0, ((then or created) - created).total_seconds())
