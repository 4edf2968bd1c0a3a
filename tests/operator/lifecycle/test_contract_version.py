"""A trainer image the operator cannot work with: the run fails IncompatibleTrainer on the
image's first report, with the documented condition and a Warning Event, its driver stopped
and its cluster deleted, and no restart spent. The image announces a newer contract version
through its test hook, as an image built from a newer tree would."""

from __future__ import annotations

import pytest

from grpo_operator.api.contract import CONTRACT_VERSION
from tests.operator.lifecycle.runs import tiny_example
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


def test_an_image_newer_than_the_operator_is_refused_without_a_restart(cluster, runs, tmp_path):
    body = tiny_example(tmp_path)
    name = body["metadata"]["name"]
    newer = f"{CONTRACT_VERSION.major}.{CONTRACT_VERSION.minor + 1}"
    body["spec"]["resources"]["env"] = [{"name": "GRPO_TEST_CONTRACT_VERSION", "value": newer}]
    runs.create(body)
    wait_for(lambda: runs.phase(name) in ("Succeeded", "Failed"), 300, what="the end")
    status = runs.status(name)
    assert (status["phase"], status["terminal"]["reason"]) == ("Failed", "IncompatibleTrainer")
    failed = runs.condition(name, "Failed")
    assert failed["status"] == "True" and failed["reason"] == "IncompatibleTrainer"
    assert f"speaks contract {newer}, this operator {CONTRACT_VERSION}" in failed["message"]
    assert status["recovery"]["restarts"] == 0 and status["recovery"]["attempt"] == 1
    assert status["ledger"].get("completedSteps", 0) == 0  # nothing of its reports was taken
    runs.posted(name, lambda e: e[:2] == ("Warning", "IncompatibleTrainer"),
                what="the IncompatibleTrainer Warning")
    wait_for(lambda: "RayCluster" not in runs.children(name)
             and not runs.children(name).get("Job"), 60, what="the driver and cluster gone")
