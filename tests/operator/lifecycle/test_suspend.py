"""Suspend mid-run: the trainer checkpoints, the RayCluster goes, the run waits Suspended;
resume: a new attempt on a new RayCluster continues from that checkpoint; cancel: the run
ends Cancelled with its ledger, its children gone."""

from __future__ import annotations

import pytest

from tests.operator.lifecycle.runs import tiny_example
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.second_cluster]


def test_suspend_resume_then_cancel(runs, tmp_path):
    body = tiny_example(tmp_path)
    name = body["metadata"]["name"]
    body["spec"]["algorithm"]["maxSteps"] = 40  # long enough to be stopped twice
    runs.create(body)
    wait_for(lambda: runs.ledger(name).get("completedSteps", 0) >= 1, 300,
             what="the first step in status")
    first_cluster = runs.ray_cluster(name)["metadata"]["uid"]
    judged, message = runs.kstatus(name)
    assert (judged, message.split(": ")[0]) == ("InProgress", "running"), message

    runs.patch(name, {"spec": {"runPolicy": {"suspend": True}}})
    wait_for(lambda: runs.phase(name) == "Suspended", 180, what="Suspended")
    status = runs.status(name)
    # At rest, not done: Ready=False, which kstatus reads as InProgress.
    assert runs.kstatus(name) == (
        "InProgress", f"suspended: step {status['ledger']['completedSteps']}/40")
    assert runs.ray_cluster(name) is None
    assert runs.condition(name, "Suspended")["status"] == "True"
    checkpoint = status["recovery"]["lastCheckpoint"]["step"]
    assert checkpoint >= 1
    # The trainer's last word was the checkpoint it wrote on SIGTERM.
    assert checkpoint == status["ledger"]["completedSteps"]
    assert "stopping" not in status
    runs.posted(name, lambda e: e[1] == "Stopping", what="the Stopping Event")

    runs.patch(name, {"spec": {"runPolicy": {"suspend": False}}})
    wait_for(lambda: runs.in_attempt(name, 2, "Running"), 180,
             what="the resumed attempt running")
    assert runs.ray_cluster(name)["metadata"]["uid"] != first_cluster
    # A resume starts a new RayCluster: new Ray nodes, a new engine (minutes on a busy 2-core
    # machine), then the restore.
    wait_for(lambda: runs.ledger(name).get("completedSteps", 0) > checkpoint, 600,
             what="a step after the resume")
    recovery = runs.status(name)["recovery"]
    assert recovery["resumedFromStep"] == checkpoint
    assert recovery["restarts"] == 0  # a suspension is not a failure
    assert [h["reason"] for h in recovery["history"]] == ["Started", "Resumed"]

    runs.patch(name, {"spec": {"runPolicy": {"cancel": True}}})
    wait_for(lambda: (runs.status(name).get("terminal") or {}).get("cleanup"), 180,
             what="Cancelled and cleaned up")
    status = runs.status(name)
    assert status["phase"] == "Cancelled"
    assert status["terminal"]["reason"] == "Cancelled"
    assert runs.kstatus(name) == ("Failed", status["terminal"]["message"])
    assert status["ledger"]["completedSteps"] > checkpoint  # the ledger is kept
    assert status["recovery"]["lastCheckpoint"]["step"] > checkpoint
    assert "RayCluster" not in runs.children(name)
