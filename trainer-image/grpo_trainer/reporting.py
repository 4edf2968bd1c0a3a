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
import sys
import threading
from typing import TextIO

from grpo_operator.api.report import Report, TrainerState
from grpo_operator.api.status import AttemptFailure, TrainerLedger, TrainerRecovery, TrainerTerminal

REPORT_MARKER = "GRPO_REPORT "


def report_line(report: Report) -> str:
    return REPORT_MARKER + report.to_json()


def parse_report_line(line: str) -> tuple[str, tuple[int, int]] | None:
    """The report JSON of a report line and its (attempt, sequence); None for other lines.
    Only the cursor is read here: the operator validates the document."""
    line = line.strip()
    if not line.startswith(REPORT_MARKER):
        return None
    text = line[len(REPORT_MARKER):]
    try:
        doc = json.loads(text)
        return text, (int(doc["attempt"]), int(doc["sequence"]))
    except (ValueError, KeyError, TypeError):
        return None


class Reporter:
    """Publishes the trainer's reports for one attempt, numbering them."""

    def __init__(self, attempt: int, stream: TextIO | None = None):
        self.attempt = attempt
        self.stream = stream or sys.stdout
        self._sequence = 0
        self._lock = threading.Lock()

    def publish(
        self,
        state: TrainerState,
        ledger: TrainerLedger,
        recovery: TrainerRecovery | None = None,
        terminal: TrainerTerminal | None = None,
        failure: AttemptFailure | None = None,
    ) -> Report:
        """Write the next report (``failure``: why this attempt ends, when it is retryable)."""
        with self._lock:
            report = Report(
                schema_version=1,
                attempt=self.attempt,
                sequence=self._sequence,
                time=datetime.datetime.now(datetime.UTC).replace(microsecond=0),
                state=state,
                ledger=ledger,
                recovery=recovery or TrainerRecovery(),
                terminal=terminal,
                failure=failure,
            )
            self._sequence += 1
            self.stream.write(f"\n{report_line(report)}\n")
            self.stream.flush()
        return report
