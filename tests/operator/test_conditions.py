"""Conditions set on a status as stored: other entries untouched, the transition time kept
while the status does not move."""

from __future__ import annotations

import datetime

from grpo_operator.api.constants import ConditionType
from grpo_operator.api.status import GRPORunStatus
from grpo_operator.conditions import set_condition, set_wire_condition

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
