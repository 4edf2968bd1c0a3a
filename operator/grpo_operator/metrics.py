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


class _RunsCollector(Collector):
    def __init__(self, lock: threading.Lock, runs: dict[Key, GRPORunStatus]):
        self._lock = lock
        self._runs = runs

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            statuses = list(self._runs.items())
        by_phase = GaugeMetricFamily("grpo_runs", "GRPORuns served, by phase", labels=["phase"])
        tally = Tally(str(s.phase or Phase.PENDING) for _, s in statuses)
        for phase in Phase:
            by_phase.add_metric([str(phase)], tally.get(str(phase), 0))
        yield by_phase
        gpu = GaugeMetricFamily("grpo_run_gpu_seconds",
                                "GPU-seconds metered for a run (status.ledger.gpuSeconds)",
                                labels=["namespace", "name"])
        for (namespace, name), s in statuses:
            gpu.add_metric([namespace, name], s.ledger.gpu_seconds)
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
            left = s.ledger.budget_remaining
            if left is not None and left.gpu_hours is not None:
                gpu_left.add_metric([namespace, name], left.gpu_hours * 3600)
            if left is not None and left.generated_tokens is not None:
                tokens_left.add_metric([namespace, name], left.generated_tokens)
        yield gpu_left
        yield tokens_left


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._lock = threading.Lock()
        self._runs: dict[Key, GRPORunStatus] = {}
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
        with self._lock:
            self._runs[key] = new
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
