"""The example tiny run, end to end on the local cluster: accepted, a RayCluster (KubeRay,
KWOK), the driver run for real against a real local Ray head, the real trainer on the CPU
reporting step by step into status, Succeeded with the artifact's digest, cleaned up."""

from __future__ import annotations

import re
import time

import pytest

from grpo_operator.api.checkpoint_layout import DIGEST_MANIFEST_FILE
from grpo_operator.api.digest import DigestManifest
from tests.operator.lifecycle.runs import tiny_example
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

def test_the_tiny_example_trains_to_success_and_cleans_up(cluster, operator, runs, tmp_path):
    body = tiny_example(tmp_path)
    name, steps = body["metadata"]["name"], body["spec"]["algorithm"]["maxSteps"]
    run = runs.create(body)

    # Watch status as a user would: every phase and every mirrored step.
    phases, completed = [], []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        status = runs.status(name)
        if status.get("phase") and (not phases or phases[-1] != status["phase"]):
            phases.append(status["phase"])
        done = (status.get("ledger") or {}).get("completedSteps")
        if done is not None and (not completed or completed[-1] != done):
            completed.append(done)
        if status.get("phase") in ("Succeeded", "Failed"):
            break
        time.sleep(0.5)
    logs = cluster.driver_runner.process_log(runs.namespace, f"{name}-a1")
    assert status["phase"] == "Succeeded", (status, logs.read_text()[-4000:])
    assert phases[-1] == "Succeeded" and "Running" in phases  # Provisioning may be too quick
    assert completed[-1] == steps and len(completed) >= 2, completed  # mirrored as it went

    waited = cluster.kubectl("wait", f"grpo/{name}", "-n", runs.namespace,
                             "--for=condition=Succeeded", "--timeout=10s")
    assert "condition met" in waited.stdout

    ledger, terminal = status["ledger"], status["terminal"]
    assert ledger["plannedSteps"] == steps
    assert ledger["generatedTokens"] > 0 and ledger["promptTokens"] > 0
    assert ledger["budgetRemaining"]["generatedTokens"] == (
        body["spec"]["budget"]["maxGeneratedTokens"] - ledger["generatedTokens"]
    )
    artifact = tmp_path / "checkpoints" / run["metadata"]["uid"] / "artifact"
    assert terminal["outcome"] == "Succeeded"
    assert terminal["artifact"]["path"] == f"/checkpoints/{run['metadata']['uid']}/artifact"
    assert terminal["artifact"]["sha256"] == DigestManifest.for_directory(
        artifact, exclude=[DIGEST_MANIFEST_FILE]).digest

    # Cleanup: the RayCluster goes, and the receipt is written only once it is gone.
    wait_for(lambda: (runs.status(name).get("terminal") or {}).get("cleanup"), 60,
             what="the cleanup receipt")
    assert "RayCluster" not in runs.children(name)
    assert runs.status(name)["terminal"]["cleanup"]["rayClusterDeleted"] is True
    reasons = [reason for _, reason, _ in runs.events(name)]
    for expected in ("Accepted", "Provisioning", "Running", "Succeeded", "CleanedUp"):
        assert expected in reasons

    # What the run cost the API server, as the operator accounts for it: every pass reads the
    # run and its children by name, so the requests per pass stay a small constant.
    cost = wait_for(lambda: re.search(
        rf"run {runs.namespace}/{name}: (\d+) API requests in (\d+) reconcile passes",
        operator.log_path.read_text()), 30, what="the run's cost in the operator log")
    requests, passes = map(int, cost.groups())
    assert 0 < requests <= 12 * passes, (requests, passes)
