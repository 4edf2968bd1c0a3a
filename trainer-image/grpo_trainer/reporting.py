"""The trainer's reports: built here, published as one line in the job's log, relayed by the
driver into the run's report ConfigMap.

Why a log line: the trainer runs on the Ray head, whose pods carry no Kubernetes credentials
(``automountServiceAccountToken: false``); the driver pod is the only holder of the run's
identity, and it already streams the job's log. A report line is

    GRPO_REPORT {"schemaVersion": 1, "attempt": 1, "sequence": 7, ...}

the whole report document (the contract's ``Report``), replaced whole by each newer one.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import sys
import threading
from typing import NamedTuple, TextIO

from grpo_operator.api.contract import CONTRACT_VERSION
from grpo_operator.api.report import Report, StepFigures, TrainerState
from grpo_operator.api.status import (
    AttemptFailure,
    ReportCursor,
    TrainerLedger,
    TrainerProgress,
    TrainerRecovery,
    TrainerTerminal,
)

REPORT_MARKER = "GRPO_REPORT "
TEST_CONTRACT_VERSION_ENV = "GRPO_TEST_CONTRACT_VERSION"
"""Test hook, for the operator's refusal only (nothing else reads it): the contract version
the reports announce instead of the image's own, as an image of another version would."""


def report_line(report: Report) -> str:
    return REPORT_MARKER + report.to_json()


class ReportLine(NamedTuple):
    """A report line's document as printed, its (attempt, sequence), and whether it is the
    attempt's terminal report (state Finished)."""

    text: str
    cursor: tuple[int, int]
    finished: bool


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses as infinity
        raise ValueError(f"{text} is not a finite number")
    return value


def parse_report_line(line: str) -> ReportLine | None:
    """The report of a report line; None for other lines and for any line that cannot be a
    report. Only the cursor and the state are read here (the operator validates the
    document), but strictly: a JSON object without a non-finite number anywhere (Python's
    ``json`` accepts ``NaN`` and ``Infinity``, no other JSON reader does), and an attempt and
    sequence that are integers within the contract's bounds. Never raises, whatever the line.
    """
    line = line.strip()
    if not line.startswith(REPORT_MARKER):
        return None
    text = line[len(REPORT_MARKER):]
    try:
        doc = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite)
        if not isinstance(doc, dict):
            return None
        cursor = ReportCursor.model_validate(
            {"attempt": doc.get("attempt"), "sequence": doc.get("sequence")})
    except (ValueError, RecursionError):  # RecursionError: nesting too deep for the parser
        return None
    return ReportLine(text, (cursor.attempt, cursor.sequence),
                      doc.get("state") == TrainerState.FINISHED)


class Reporter:
    """Publishes the trainer's reports for one attempt, numbering them."""

    def __init__(self, attempt: int, stream: TextIO | None = None):
        self.attempt = attempt
        self.stream = stream or sys.stdout
        self.contract_version = os.environ.get(TEST_CONTRACT_VERSION_ENV) or str(CONTRACT_VERSION)
        self._sequence = 0
        self._lock = threading.Lock()

    def publish(
        self,
        state: TrainerState,
        ledger: TrainerLedger,
        recovery: TrainerRecovery | None = None,
        terminal: TrainerTerminal | None = None,
        failure: AttemptFailure | None = None,
        progress: TrainerProgress | None = None,
        last_step: StepFigures | None = None,
    ) -> Report:
        """Write the next report (``failure``: why this attempt ends, when it is retryable)."""
        with self._lock:
            report = Report(
                schema_version=1,
                contract_version=self.contract_version,
                attempt=self.attempt,
                sequence=self._sequence,
                time=datetime.datetime.now(datetime.UTC).replace(microsecond=0),
                state=state,
                ledger=ledger,
                recovery=recovery or TrainerRecovery(),
                progress=progress,
                last_step=last_step,
                terminal=terminal,
                failure=failure,
            )
            self._sequence += 1
            self.stream.write(f"\n{report_line(report)}\n")
            self.stream.flush()
        return report
