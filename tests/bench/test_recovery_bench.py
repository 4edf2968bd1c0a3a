"""How the recovery benchmark reads an interrupted run (pure)."""

from __future__ import annotations

import datetime

import pytest

from bench.recovery import Recovery, recovery, reports_in, section
from grpo_operator.api.report import Report
from grpo_operator.api.status import TrainerLedger, TrainerRecovery
from grpo_trainer.reporting import report_line

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
KILLED_AT = T0.timestamp() + 100.4


def _report(attempt: int, sequence: int, state: str, steps: int, at: float,
            resumed_from: int | None = None) -> dict:
    return {"attempt": attempt, "sequence": sequence, "state": state,
            "time": (T0 + datetime.timedelta(seconds=at)).isoformat(),
            "ledger": {"completedSteps": steps},
            "recovery": {"resumedFromStep": resumed_from}}


FIRST = [_report(1, 0, "Starting", 0, 1), _report(1, 3, "Running", 2, 99),
         _report(1, 4, "Suspended", 3, 102)]
SECOND = [_report(2, 0, "Starting", 0, 110), _report(2, 1, "Starting", 2, 112, resumed_from=2),
          _report(2, 2, "Running", 3, 130, resumed_from=2)]
STATUS = {"phase": "Succeeded", "recovery": {"rollout": {"reusedGroups": 2,
                                                         "abandonedAttempts": 1}}}


def test_a_recovery_is_timed_from_the_deletion_by_the_reports_of_both_attempts():
    found = recovery("driver pod", "sibling", KILLED_AT, 2, FIRST, SECOND, KILLED_AT + 5,
                     STATUS)
    assert found == Recovery(lost="driver pod", granularity="sibling", phase="Succeeded",
                             checkpoint_step=2, steps_done=3, resumed_from=2,
                             new_driver_seconds=5.0,
                             restored_seconds=pytest.approx(11.6),
                             resumed_seconds=pytest.approx(29.6), reused_groups=2,
                             abandoned_attempts=1)
    assert found.steps_lost == 1


def test_a_run_that_never_resumed_has_no_resume_figures():
    found = recovery("Ray worker pod", "promptGroup", KILLED_AT, 2, FIRST, [], None,
                     {"phase": "Failed"})
    assert (found.resumed_from, found.steps_lost, found.new_driver_seconds,
            found.restored_seconds, found.resumed_seconds, found.reused_groups) == (None,) * 6
    assert found.steps_done == 3


def test_reports_are_read_from_a_driver_log_between_other_lines(tmp_path):
    written = Report(schema_version=1, attempt=2, sequence=5, time=T0, state="Running",
                     ledger=TrainerLedger(planned_steps=4, completed_steps=3),
                     recovery=TrainerRecovery(resumed_from_step=2))
    log = tmp_path / "container.log"
    log.write_text(f"starting\n{report_line(written)}\nnot a report\n")
    [doc] = reports_in(log)
    assert (doc["attempt"], doc["sequence"], doc["ledger"]["completedSteps"],
            doc["recovery"]["resumedFromStep"]) == (2, 5, 3, 2)
    assert reports_in(None) == []


def test_the_section_has_a_row_per_scenario():
    text = section([
        recovery("driver pod", "sibling", KILLED_AT, 2, FIRST, SECOND, KILLED_AT + 5, STATUS),
        recovery("Ray worker pod", "promptGroup", KILLED_AT, 2, FIRST, [], None,
                 {"phase": "Failed"})])
    rows = [line for line in text.splitlines() if line.startswith(("| driver", "| Ray"))]
    assert rows == [
        "| driver pod | sibling | Succeeded | 2 | 3 | 2 | 1 | 5.0 | 11.6 | 29.6 | 2 | 1 |",
        "| Ray worker pod | promptGroup | Failed | 2 | 3 | – | – | – | – | – | – | – |"]
