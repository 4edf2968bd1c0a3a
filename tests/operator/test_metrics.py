"""The operator's Prometheus metrics, as a scrape shows them."""

from __future__ import annotations

import datetime

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from grpo_operator.api.status import GRPORunStatus, ReportCursor
from grpo_operator.conditions import set_condition
from grpo_operator.metrics import Metrics

CREATED = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.UTC)


def samples(metrics: Metrics) -> dict[tuple[str, tuple], float]:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_runs_by_phase_restarts_waits_and_gpu_seconds():
    m = Metrics()
    empty = GRPORunStatus()
    ready_at = CREATED + datetime.timedelta(seconds=42)
    running = GRPORunStatus.model_validate({
        "phase": "Running", "activeSince": ready_at.isoformat(),
        "ledger": {"gpuSeconds": 12.5, "lastReportTime": (
            CREATED + datetime.timedelta(seconds=100)).isoformat(),
            "budgetRemaining": {"gpuHours": 0.5, "generatedTokens": 1000}},
        "recovery": {"restarts": 1},
    })
    running.conditions = set_condition([], "ClusterReady", True, "Healthy", "",
                                       generation=1, now=ready_at)
    running.accepted_report = ReportCursor(attempt=1, sequence=0)
    m.record(("ns", "a"), empty, running, CREATED)
    m.record(("ns", "b"), empty, GRPORunStatus(phase="Failed"), CREATED)
    m.reconcile_errors.inc()
    m.reconcile_duration.observe(0.02)
    got = samples(m)
    assert got[("grpo_runs", (("phase", "Running"),))] == 1
    assert got[("grpo_runs", (("phase", "Failed"),))] == 1
    assert got[("grpo_runs", (("phase", "Suspended"),))] == 0
    assert got[("grpo_run_gpu_seconds", (("name", "a"), ("namespace", "ns")))] == 12.5
    assert got[("grpo_run_budget_remaining_gpu_seconds",
                (("name", "a"), ("namespace", "ns")))] == 1800
    assert got[("grpo_run_budget_remaining_tokens", (("name", "a"), ("namespace", "ns")))] == 1000
    # A run without a budget has no series rather than an infinite one.
    assert ("grpo_run_budget_remaining_tokens", (("name", "b"), ("namespace", "ns"))) not in got
    assert got[("grpo_reconcile_duration_seconds_count", ())] == 1
    assert got[("grpo_reconcile_duration_seconds_bucket", (("le", "0.025"),))] == 1
    assert got[("grpo_reconcile_duration_seconds_bucket", (("le", "0.01"),))] == 0
    assert got[("grpo_run_restarts_total", ())] == 1
    assert got[("grpo_reconcile_errors_total", ())] == 1
    assert got[("grpo_run_time_to_cluster_ready_seconds_sum", ())] == 42
    assert got[("grpo_run_time_to_running_seconds_sum", ())] == 100
    # The same status again observes nothing twice.
    m.record(("ns", "a"), running, running, CREATED)
    assert samples(m)[("grpo_run_time_to_cluster_ready_seconds_count", ())] == 1
    m.forget(("ns", "a"))
    assert samples(m)[("grpo_runs", (("phase", "Running"),))] == 0
