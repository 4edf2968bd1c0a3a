"""Polling helper for tests that wait on controllers."""

from __future__ import annotations

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
