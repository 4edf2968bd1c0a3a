"""The example tiny run, end to end on the local cluster, as `make demo` runs it: accepted, a
RayCluster (KubeRay, KWOK), the driver run for real against a real local Ray head, the real
trainer on the CPU reporting into status, Succeeded with the artifact's digest, cleaned up."""

from __future__ import annotations

import re

import pytest

from demo import __main__ as demo
from demo import inputs
from grpo_operator.api.checkpoint_layout import DIGEST_MANIFEST_FILE
from grpo_operator.api.digest import DigestManifest
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


def test_the_tiny_example_trains_to_success_and_cleans_up(cluster, operator, runs, tmp_path,
                                                          capsys):
    """This is also `make demo`, shortened: the demo's own code applies and follows the run."""
    body = inputs.relocate(inputs.load_example(), tmp_path)
    name, steps = body["metadata"]["name"], body["spec"]["algorithm"]["maxSteps"]
    code = demo.run(cluster, body, tmp_path / "demo", timeout=600, namespace=runs.namespace)
    shown = capsys.readouterr().out
    status = runs.status(name)
    assert code == 0, (status, shown[-4000:])
    run = runs.get(name)
    assert f"Succeeded     step {steps}/{steps}" in shown, shown[-4000:]
    curve = (tmp_path / "demo" / "curve.txt").read_text().splitlines()
    assert [int(row.split()[0]) for row in curve[1:]] == list(range(1, steps + 1)), curve
    assert (tmp_path / "demo" / "curve.png").stat().st_size > 0

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

    # What the run cost the API server, as the operator accounts for it: passes read the run
    # and its children from the watches' cache, so requests are writes (creates, status,
    # Events), and reads only of the run itself while its cache is behind a write of its own.
    cost = wait_for(lambda: re.search(
        rf"run {runs.namespace}/{name}: (\d+) API requests \((\d+) reads\) in (\d+) "
        r"reconcile passes", operator.log_path.read_text()), 30,
        what="the run's cost in the operator log")
    requests, reads, passes = map(int, cost.groups())
    assert 0 < requests <= 2 * passes, (requests, passes)
    assert reads <= requests - reads, (reads, requests)
