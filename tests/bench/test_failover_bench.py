"""The failover benchmark's pure parts: how it reads "every run reconciled" off a replica's
metrics (a real /metrics endpoint), and its section."""

from __future__ import annotations

from bench import failover
from grpo_operator.api.constants import Phase
from grpo_operator.api.status import GRPORunStatus
from grpo_operator.metrics import Metrics
from localcluster.processes import free_port


def test_runs_passed_over_are_read_from_the_replicas_gauge():
    metrics, port = Metrics(), free_port()
    metrics.serve(port)
    assert failover._runs_passed(port) == 0
    for name, phase in (("a", Phase.PENDING), ("b", Phase.RUNNING), ("c", None)):
        metrics.record(("ns", name), GRPORunStatus(), GRPORunStatus(phase=phase), None)
    assert failover._runs_passed(port) == 3
    assert failover._runs_passed(free_port()) == 0  # a replica that does not answer


def test_the_section_shows_what_was_measured_and_what_was_not():
    text = failover.section(failover.Failover(
        runs=200, clusters_at_kill=67, takeover=16.04, reconciled=17.5, all_ready=None,
        most_clusters_per_run=1, most_jobs_per_run=1, later_attempts=0))
    assert "## Leader killed mid-provisioning" in text
    row = next(line for line in text.splitlines() if line.startswith("| 200"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:4] == ["200", "67/200", "16.0", "17.5"]
    assert cells[4] == failover.MISSING and cells[5:] == ["1", "1", "0"]


def test_duplicates_are_counted_per_run_from_the_labels():
    run = failover.LABEL_RUN
    assert failover._most_per_run([{run: "a"}, {run: "b"}, {run: "a"}, None, {}]) == 2
    assert failover._most_per_run([]) == 0
