"""Relaying the trainer's report lines from the job's log into the run's report ConfigMap (and,
through a relay of its own, to the driver's metrics endpoint, ``metrics.py``).

Only a report newer than the last one relayed (by attempt, then sequence) is written, so a
restarted driver replaying the log from the start never writes an older report over a newer
one; the operator applies the same rule to what it reads. A report line that cannot be a report
(``parse_report_line``) is skipped, whatever it holds: the log goes on.

Trust: anyone who may patch ConfigMaps in the run's namespace can write the report ConfigMap,
and anything running in the trainer's process can print a report line. So:

- every report written carries its signature under the run's report key
  (``REPORT_SIGNATURE_KEY``, in the same patch), the only thing the operator trusts;
- the starting cursor comes from the stored report only when that is a validly signed report
  of the driver's own attempt: a leftover ``{"attempt": 999999, ...}`` would otherwise make
  every genuine report look older and silence the relay;
- the ConfigMap relay takes only its own attempt's reports from the log (a job runs one
  attempt), and, like the operator, no report whose sequence jumps more than
  ``MAX_SEQUENCE_STEP`` past the last one, for the same reason.

The terminal report (state Finished) is the authority on how a run ended: without it a finished
run ends Failed. A failed write of it is retried (`ReportRelay.settle`, with `Backoff`) once the
job ended; other reports are best-effort, the next one being another chance.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grpo_operator.api.report import (
    MAX_SEQUENCE_STEP,
    REPORT_SIGNATURE_KEY,
    sign_report,
    signature_valid,
)
from grpo_trainer.driver import settings
from grpo_trainer.reporting import REPORT_MARKER, ReportLine, parse_report_line

log = logging.getLogger("grpo_trainer.driver")

Cursor = tuple[int, int]


class ReportKeyError(Exception):
    """The run's report key is not available: the driver cannot sign, so it does not start."""


def read_report_key(path: str | None) -> bytes:
    """The report key: the raw bytes of the file ``path`` ($GRPO_REPORT_KEY_PATH)."""
    if not path:
        raise ReportKeyError(
            f"${settings.REPORT_KEY_PATH_ENV} is not set: the driver cannot sign the trainer's "
            "reports, and the operator ignores unsigned ones"
        )
    try:
        key = Path(path).read_bytes()
    except OSError as exc:
        raise ReportKeyError(f"cannot read the report key file {path} "
                             f"(${settings.REPORT_KEY_PATH_ENV}): {exc.strerror}") from None
    if not key:
        raise ReportKeyError(f"the report key file {path} (${settings.REPORT_KEY_PATH_ENV}) "
                             "is empty")
    return key


@dataclass(frozen=True)
class Backoff:
    """Retries of the terminal report's write: the waits start at ``first`` seconds and double
    up to ``longest``, until ``timeout`` seconds have passed (see
    `settings.DEFAULT_REPORT_TIMEOUT_S`)."""

    timeout: float = settings.DEFAULT_REPORT_TIMEOUT_S
    first: float = 1.0
    longest: float = 15.0


class ReportRelay:
    """Fed the job's log in arbitrary chunks; calls ``sink(report_json)`` for each report
    that is newer than the last one written (only the newest of a chunk).

    ``attempt``: take only that attempt's reports. ``terminal_retry``: retry a failed write of
    the terminal report in `settle` (without it, that write is as best-effort as the others).
    """

    def __init__(self, sink: Callable[[str], None], last: Cursor | None = None, *,
                 attempt: int | None = None, terminal_retry: Backoff | None = None):
        self._sink = sink
        self._last = last
        self._attempt = attempt
        self._retry = terminal_retry
        self._unwritten: ReportLine | None = None
        self._partial = ""
        self._refused: set[str] = set()
        # The log thread feeds the relay; the main thread settles it once the job ended.
        self._lock = threading.Lock()

    def feed(self, text: str) -> None:
        with self._lock:
            lines = (self._partial + text).split("\n")
            self._partial = lines.pop()
            self._relay(lines)

    def close(self) -> None:
        with self._lock:
            self._relay([self._partial])
            self._partial = ""

    def settle(self) -> bool:
        """Once the job ended: retry the write of a terminal report that failed, until written
        or the retry's timeout passed. Whether no terminal report is left unwritten."""
        if self._unwritten is None:  # (only ever set with a terminal_retry)
            return True
        retry = self._retry
        deadline = time.monotonic() + retry.timeout
        delay = retry.first
        while (remaining := deadline - time.monotonic()) > 0:
            time.sleep(min(delay, remaining))
            with self._lock:
                if self._unwritten is None or self._write(self._unwritten):
                    return True
            delay = min(2 * delay, retry.longest)
        log.error("gave up writing the terminal report %s after %gs of retries",
                  self._unwritten.cursor, retry.timeout)
        return False

    def _relay(self, lines: list[str]) -> None:
        found = [f for f in map(parse_report_line, lines) if f is not None and self._takes(f)]
        newest = max(found, key=lambda f: f.cursor, default=None)
        if newest is None or (self._last is not None and newest.cursor <= self._last):
            return
        self._write(newest)

    def _takes(self, report: ReportLine) -> bool:
        attempt, sequence = report.cursor
        if self._attempt is not None and attempt != self._attempt:
            return self._refuse(f"of attempt {attempt}, not this driver's {self._attempt}",
                                report)
        same_attempt = self._last is not None and self._last[0] == attempt
        base = self._last[1] if same_attempt else 0
        if sequence - base > MAX_SEQUENCE_STEP:
            return self._refuse(f"its sequence jumps more than {MAX_SEQUENCE_STEP} past the "
                                "last report relayed", report)
        return True

    def _refuse(self, why: str, report: ReportLine) -> bool:
        # Once per cause: a reopened log stream replays every line.
        if why not in self._refused:
            self._refused.add(why)
            log.warning("ignoring report %s of the trainer's log: %s", report.cursor, why)
        return False

    def _write(self, report: ReportLine) -> bool:
        try:
            self._sink(report.text)
        except Exception as exc:  # the log goes on; see settle for the terminal report
            log.warning("could not relay report %s: %s", report.cursor, exc)
            if report.finished and self._retry is not None:
                self._unwritten = report
            return False
        self._last = report.cursor
        self._unwritten = None
        return True


class ConfigMapSink:
    """Writes signed reports into the report ConfigMap with the pod's own (per-run) identity
    (``core``: a CoreV1Api of another identity, for tests)."""

    def __init__(self, namespace: str, name: str, key: str, report_key: bytes, *,
                 request_timeout: float = settings.DEFAULT_REQUEST_TIMEOUT_S, core=None):
        if core is None:
            from kubernetes import client, config

            config.load_incluster_config()
            core = client.CoreV1Api()
        self._core = core
        self._report_key = report_key
        # The Kubernetes client sends its requests without a timeout by default.
        self._timeout = request_timeout
        self.namespace, self.name, self.key = namespace, name, key

    def stored_cursor(self, attempt: int) -> Cursor | None:
        """The cursor of the report already in the ConfigMap (a restarted driver's start) when
        it is a report of ``attempt`` signed with the run's key; None otherwise."""
        cm = self._core.read_namespaced_config_map(self.name, self.namespace,
                                                   _request_timeout=self._timeout)
        data = cm.data or {}
        text = data.get(self.key)
        if text is None:
            return None
        found = parse_report_line(REPORT_MARKER + text)
        if found is None:
            why = "it is not a report"
        elif not signature_valid(self._report_key, text, data.get(REPORT_SIGNATURE_KEY)):
            why = "it is not signed with the run's report key"
        elif found.cursor[0] > attempt:
            why = f"it claims attempt {found.cursor[0]}, after this driver's {attempt}"
        elif found.cursor[0] < attempt:
            log.info("the report ConfigMap holds attempt %d's last report; relaying attempt "
                     "%d's from the start", found.cursor[0], attempt)
            return None
        else:
            return found.cursor
        log.warning("ignoring the report in ConfigMap %s/%s (%s): relaying this attempt's "
                    "reports from the start", self.namespace, self.name, why)
        return None

    def __call__(self, report_json: str) -> None:
        signature = sign_report(self._report_key, report_json)
        self._core.patch_namespaced_config_map(
            self.name, self.namespace,
            {"data": {self.key: report_json, REPORT_SIGNATURE_KEY: signature}},
            _request_timeout=self._timeout,
        )
