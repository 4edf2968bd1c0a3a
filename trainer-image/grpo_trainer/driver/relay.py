"""Relaying the trainer's report lines from the job's log into the run's report ConfigMap (and,
through a relay of its own, to the driver's metrics endpoint, ``metrics.py``).

Only a report newer than the last one relayed (by attempt, then sequence) is written, so a
restarted driver replaying the log from the start never writes an older report over a newer
one; the operator applies the same rule to what it reads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from grpo_trainer.reporting import REPORT_MARKER, parse_report_line

log = logging.getLogger("grpo_trainer.driver")

Cursor = tuple[int, int]


class ReportRelay:
    """Fed the job's log in arbitrary chunks; calls ``sink(report_json)`` for each report
    that is newer than the last one written (only the newest of a chunk)."""

    def __init__(self, sink: Callable[[str], None], last: Cursor | None = None):
        self._sink = sink
        self._last = last
        self._partial = ""

    def feed(self, text: str) -> None:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        self._relay(lines)

    def close(self) -> None:
        self._relay([self._partial])
        self._partial = ""

    def _relay(self, lines: list[str]) -> None:
        found = [f for f in map(parse_report_line, lines) if f is not None]
        newest = max(found, key=lambda f: f[1], default=None)
        if newest is None or (self._last is not None and newest[1] <= self._last):
            return
        try:
            self._sink(newest[0])
            self._last = newest[1]
        except Exception as exc:  # the next report is another chance; the log goes on
            log.warning("could not relay report %s: %s", newest[1], exc)


class ConfigMapSink:
    """Writes reports into the report ConfigMap with the pod's own (per-run) identity."""

    def __init__(self, namespace: str, name: str, key: str):
        from kubernetes import client, config

        config.load_incluster_config()
        self._core = client.CoreV1Api()
        self.namespace, self.name, self.key = namespace, name, key

    def last_cursor(self) -> Cursor | None:
        """The cursor of the report already in the ConfigMap (a restarted driver's start)."""
        data = self._core.read_namespaced_config_map(self.name, self.namespace).data or {}
        found = parse_report_line(REPORT_MARKER + data[self.key]) if self.key in data else None
        return found[1] if found else None

    def __call__(self, report_json: str) -> None:
        self._core.patch_namespaced_config_map(
            self.name, self.namespace, {"data": {self.key: report_json}}
        )
