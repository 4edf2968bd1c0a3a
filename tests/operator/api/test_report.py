"""The trainer's report: round trip, strict rejections naming the field, staleness, size."""

from __future__ import annotations

import json

import pytest

from grpo_operator.api.report import (
    MAX_REPORT_BYTES,
    Report,
    ReportError,
    TrainerState,
    is_stale,
    parse_report,
)
from grpo_operator.api.status import GRPORunStatus, ReportCursor

SHA = "0123456789abcdef" * 4


def report_doc(**overrides) -> dict:
    doc = {
        "schemaVersion": 1,
        "attempt": 2,
        "sequence": 7,
        "time": "2025-01-02T03:04:05Z",
        "state": "Running",
        "ledger": {
            "plannedSteps": 10,
            "completedSteps": 4,
            "promptTokens": 1000,
            "generatedTokens": 5000,
            "rewardMean": 0.25,
            "rewardStd": 0.1,
            "kl": 0.002,
            "tokensPerSecond": 120.5,
        },
        "recovery": {
            "resumedFromStep": 2,
            "lastCheckpoint": {
                "step": 4,
                "path": "/checkpoints/uid-1/step_4",
                "sha256": SHA,
                "time": "2025-01-02T03:04:00Z",
            },
            "rollout": {
                "sealedGroups": 30,
                "reusedGroups": 4,
                "abandonedAttempts": 1,
                "batchShortfall": 0,
            },
        },
    }
    doc.update(overrides)
    return doc


def finished(outcome: str = "Succeeded", artifact: bool = True) -> dict:
    terminal = {
        "outcome": outcome,
        "reason": "Completed",
        "message": "done",
        "finishedTime": "2025-01-02T04:00:00Z",
    }
    if artifact:
        terminal["artifact"] = {"path": "/checkpoints/uid-1/artifact", "step": 4, "sha256": SHA}
    return report_doc(state="Finished", terminal=terminal)


def test_round_trip():
    report = parse_report(json.dumps(finished()))
    assert report.state is TrainerState.FINISHED
    assert report.terminal.artifact.sha256 == SHA
    again = parse_report(report.to_json())
    assert again == report
    assert json.loads(report.to_json())["recovery"]["rollout"]["reusedGroups"] == 4


def _refusal(doc) -> str:
    with pytest.raises(ReportError) as refused:
        parse_report(json.dumps(doc))
    return str(refused.value)


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        (report_doc(schemaVersion=2), "schemaVersion"),
        (report_doc(extra=1), "extra"),
        ({**report_doc(), "ledger": {**report_doc()["ledger"], "steps": 1}}, "ledger.steps"),
        (report_doc(attempt="2"), "attempt"),
        (report_doc(attempt=0), "attempt"),
        (report_doc(sequence=-1), "sequence"),
        (report_doc(time="2025-01-02T03:04:05"), "time"),
        (report_doc(state="Paused"), "state"),
        ({**report_doc(), "ledger": {"plannedSteps": 3, "completedSteps": 4}}, "completedSteps"),
        ({**report_doc(), "ledger": {"rewardStd": -0.5}}, "rewardStd"),
        (finished(artifact=False), "terminal.artifact"),
        (finished(outcome="Done"), "outcome"),
        (report_doc(state="Finished"), "terminal"),
        ({**finished(), "state": "Running"}, "terminal"),
        (report_doc(state="Suspended", recovery={}), "lastCheckpoint"),
        (
            {
                **report_doc(),
                "recovery": {
                    "lastCheckpoint": {
                        **report_doc()["recovery"]["lastCheckpoint"],
                        "sha256": "abc",
                    }
                },
            },
            "sha256",
        ),
        ({**report_doc(), "recovery": {"resumedFromStep": 9}}, "resumedFromStep"),
    ],
)
def test_strict_rejection_names_the_field(doc, field):
    assert field in _refusal(doc)


def test_schema_version_is_required():
    doc = report_doc()
    del doc["schemaVersion"]
    assert "schemaVersion" in _refusal(doc)


def test_nan_is_refused():
    text = json.dumps(report_doc()).replace('"kl": 0.002', '"kl": NaN')
    with pytest.raises(ReportError, match="kl"):
        parse_report(text)


def test_not_json_is_refused():
    with pytest.raises(ReportError):
        parse_report("{not json")


def test_size_limit_on_parse_and_write():
    huge = finished()
    huge["terminal"]["message"] = "x" * 4000
    assert len(parse_report(json.dumps(huge)).to_json()) < MAX_REPORT_BYTES
    with pytest.raises(ReportError, match="bytes"):
        parse_report(json.dumps(report_doc()) + " " * MAX_REPORT_BYTES)
    assert MAX_REPORT_BYTES < 1024 * 1024 // 4  # well under etcd's object limit


@pytest.mark.parametrize(
    ("attempt", "sequence", "stale"),
    [(1, 99, True), (2, 6, True), (2, 7, True), (2, 8, False), (3, 0, False)],
)
def test_staleness_against_the_last_accepted(attempt, sequence, stale):
    report = parse_report(json.dumps(report_doc(attempt=attempt, sequence=sequence)))
    assert is_stale(report, ReportCursor(attempt=2, sequence=7)) is stale


def test_nothing_accepted_yet_means_not_stale():
    assert not is_stale(Report.model_validate(report_doc()), None)


def test_a_report_mirrors_into_status():
    report = parse_report(json.dumps(finished()))
    status = GRPORunStatus.model_validate(
        {
            "phase": "Succeeded",
            "ledger": {**report.ledger.to_wire(), "gpuSeconds": 12.5},
            "recovery": {**report.recovery.to_wire(), "attempt": 2, "restarts": 1},
            "terminal": report.terminal.to_wire(),
            "acceptedReport": report.cursor.to_wire(),
        }
    )
    assert status.accepted_report == ReportCursor(attempt=2, sequence=7)
    assert status.ledger.completed_steps == 4
