"""Polling helpers for tests that wait on controllers."""

from __future__ import annotations

import threading
import time

from kubernetes.client.rest import ApiException


def wait_for(predicate, timeout: float = 60, interval: float = 0.2, what: str = "condition"):
    """Poll until ``predicate()`` returns something truthy, and return it (a 404 counts as
    not yet)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except ApiException as e:
            if e.status != 404:
                raise
            last = None
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


class Watching:
    """``look()`` every ``interval`` seconds in a thread of its own for the duration of a
    ``with`` block, to see what happens meanwhile. A look that raises is skipped (an object may
    go between two looks): the next one counts."""

    interval = 0.5

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def look(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.look()
            except Exception:  # noqa: BLE001, S112 - see the class docstring
                continue

