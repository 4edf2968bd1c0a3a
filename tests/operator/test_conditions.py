"""Conditions set on a status as stored: other entries untouched, the transition time kept
while the status does not move; the kstatus conditions summarize the run."""

from __future__ import annotations

import datetime

import pytest

from grpo_operator.api.constants import ConditionType
from grpo_operator.api.status import GRPORunStatus
from grpo_operator.conditions import set_condition, set_wire_condition, summarize

NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
LATER = NOW + datetime.timedelta(minutes=5)


def test_a_wire_condition_keeps_the_others_and_its_transition_time():
    stored = [{"type": "Succeeded", "status": "True", "reason": "Completed",
               "lastTransitionTime": "2026-11-30T00:00:00Z", "unknownToUs": 1}]
    once = set_wire_condition(stored, ConditionType.STALLED, True, "StatusUnreadable", "m",
                              generation=3, now=NOW)
    assert once[0] == stored[0]
    assert once[1] == {"type": "Stalled", "status": "True", "reason": "StatusUnreadable",
                       "message": "m", "observedGeneration": 3,
                       "lastTransitionTime": "2026-12-01T12:00:00Z"}
    again = set_wire_condition(once, ConditionType.STALLED, True, "Forbidden", "n",
                               generation=3, now=LATER)
    assert again[1]["lastTransitionTime"] == "2026-12-01T12:00:00Z"
    assert again[1]["reason"] == "Forbidden"
    cleared = set_wire_condition(again, ConditionType.STALLED, False, "Reconciled", "",
                                 generation=3, now=LATER)
    assert cleared[1]["status"] == "False"
    assert cleared[1]["lastTransitionTime"] == "2026-12-01T12:05:00Z"


def test_a_condition_keeps_its_place_so_a_steady_status_writes_nothing():
    stored = [{"type": "Stalled", "status": "True", "reason": "Forbidden", "message": "m",
               "lastTransitionTime": "2026-12-01T12:00:00Z"},
              {"type": "ClusterReady", "status": "False", "reason": "Absent", "message": "",
               "lastTransitionTime": "2026-12-01T12:00:00Z"}]
    again = set_wire_condition(stored, ConditionType.STALLED, True, "Forbidden", "m",
                               generation=None, now=LATER)
    assert again == stored
    status = GRPORunStatus.model_validate({"conditions": stored})
    status.conditions = set_condition(status.conditions, ConditionType.STALLED, True,
                                      "Forbidden", "m", generation=None, now=LATER)
    assert status.to_wire()["conditions"] == stored


def _summarized(wire: dict) -> dict[str, tuple[str, str]]:
    status = GRPORunStatus.model_validate(wire)
    summarize(status, generation=2, now=NOW)
    return {c.type: (c.status, c.reason) for c in status.conditions
            if c.type in ("Reconciling", "Stalled", "Ready")}


def _terminal(outcome: str, reason: str) -> dict:
    artifact = {"path": "/checkpoints/u/artifact", "step": 2, "sha256": "0" * 64}
    return {"outcome": outcome, "reason": reason, "message": "m",
            "finishedTime": "2026-12-01T12:00:00Z",
            **({"artifact": artifact} if outcome == "Succeeded" else {})}


@pytest.mark.parametrize(("phase", "reconciling"), [
    (None, "True"), ("Pending", "True"), ("Accepted", "True"), ("Queued", "True"),
    ("Provisioning", "True"), ("Running", "True"), ("Recovering", "True"),
    ("Suspended", "False"),
])
def test_a_run_on_its_way_is_reconciling_and_a_suspended_one_rests(phase, reconciling):
    wire = {"phase": phase} if phase else {}
    assert _summarized(wire) == {"Reconciling": (reconciling, phase or "Pending"),
                                 "Ready": ("False", phase or "Pending")}
    status = GRPORunStatus.model_validate(wire)
    summarize(status, generation=2, now=NOW)
    assert status.condition(ConditionType.READY).message == (
        f"{(phase or 'Pending').lower()}: step 0")


@pytest.mark.parametrize(("phase", "stalled", "ready"), [
    ("Succeeded", "False", "True"), ("Failed", "True", "False"), ("Cancelled", "True", "False"),
])
def test_an_ended_run_is_ready_only_if_it_succeeded(phase, stalled, ready):
    wire = {"phase": phase, "terminal": _terminal(phase, "Why")}
    assert _summarized(wire) == {"Stalled": (stalled, "Why"), "Reconciling": ("False", "Why"),
                                 "Ready": (ready, "Why")}


def test_a_run_whose_passes_fail_stays_stalled_and_is_not_reconciling():
    stalled = {"type": "Stalled", "status": "True", "reason": "Forbidden", "message": "no",
               "lastTransitionTime": "2026-12-01T11:00:00Z"}
    assert _summarized({"phase": "Running", "conditions": [stalled]}) == {
        "Stalled": ("True", "Forbidden"), "Reconciling": ("False", "Forbidden"),
        "Ready": ("False", "Running")}


def test_the_progress_is_the_reconciling_message():
    status = GRPORunStatus.model_validate(
        {"phase": "Running", "ledger": {"plannedSteps": 5, "completedSteps": 3}})
    summarize(status, generation=2, now=NOW)
    reconciling = status.condition(ConditionType.RECONCILING)
    assert (reconciling.message, reconciling.observed_generation) == ("running: step 3/5", 2)
