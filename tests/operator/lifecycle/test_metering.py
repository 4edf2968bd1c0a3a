"""GPU-seconds are metered from the run's GPU pods while they run and stop growing once they
are gone; a non-retryable trainer exit ends the run at once; /metrics shows both."""

from __future__ import annotations

import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.operator.conftest import METRICS_URL
from tests.operator.lifecycle.runs import manifest
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


def test_gpu_seconds_grow_while_gpu_pods_run_and_a_bad_input_fails_at_once(runs, tmp_path):
    # Empty model and dataset directories: the trainer refuses them (InvalidInput), after the
    # GPU workers have been running for a while.
    runs.create(manifest("metered", str(tmp_path)))
    seen: list[float] = []

    def metered_twice():
        seen.append(runs.ledger("metered").get("gpuSeconds", 0))
        return len({s for s in seen if s > 0}) >= 2 or runs.phase("metered") == "Failed"

    wait_for(metered_twice, 120, what="GPU-seconds growing", interval=1)
    wait_for(lambda: (runs.status("metered").get("terminal") or {}).get("cleanup"), 180,
             what="Failed and cleaned up")
    status = runs.status("metered")
    assert status["terminal"]["reason"] == "InvalidInput", status["terminal"]
    assert status["recovery"]["attempt"] == 1 and status["recovery"]["restarts"] == 0
    assert runs.children("metered").get("Job") == ["metered-a1"]
    grown = sorted({s for s in seen if s > 0})
    assert len(grown) >= 2, seen  # it grew while the run lived

    final = status["ledger"]["gpuSeconds"]
    time.sleep(8)  # more than two metering intervals
    assert runs.ledger("metered")["gpuSeconds"] == final

    with urllib.request.urlopen(METRICS_URL, timeout=5) as response:
        scraped = {s.name + str(sorted(s.labels.items())): s.value
                   for family in text_string_to_metric_families(response.read().decode())
                   for s in family.samples}
    run = [("name", "metered"), ("namespace", runs.namespace)]
    assert scraped["grpo_run_gpu_seconds" + str(run)] == pytest.approx(final)
    assert scraped["grpo_runs" + str([("phase", "Failed")])] >= 1
