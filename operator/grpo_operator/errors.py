"""What a failed reconcile pass means for the run: the reason and message of its Stalled
condition and Event, and when to try again. Pure."""

from __future__ import annotations

import json
import random

from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from grpo_operator.kube import ChildConflict

FIRST_RETRY_SECONDS = 5.0
MAX_RETRY_SECONDS = 300.0
JITTER = 0.2
"""Each delay is drawn from ±20 % of the exponential step, so runs failing together (an API
server restart, a quota) do not retry in lockstep."""


class StatusUnreadable(Exception):
    """The run's status does not fit this operator's models (e.g. written by a newer one under
    a newer CRD). It is kept as it is, never reset."""


class SpecInvalid(Exception):
    """A started run's spec no longer fits the models (e.g. the CRD was rolled back)."""


def describe(error: BaseException) -> tuple[str, str]:
    """(CamelCase reason, message) of a failed pass."""
    if isinstance(error, ChildConflict):
        return "ChildConflict", str(error)
    if isinstance(error, StatusUnreadable):
        return "StatusUnreadable", f"status kept as it is, not understood: {error}"
    if isinstance(error, SpecInvalid):
        return "SpecInvalid", f"the spec no longer validates: {error}"
    if isinstance(error, ApiException):
        try:
            body = json.loads(error.body or "{}")
        except ValueError:
            body = {}
        reason = body.get("reason") or error.reason or "APIError"
        # The API's own reason (Forbidden, Invalid...) or the HTTP phrase, in CamelCase.
        reason = "".join(c for word in str(reason).split() for c in word[:1].upper() + word[1:]
                         if c.isalnum()) or "APIError"
        message = body.get("message") or str(error.reason)
        return reason, f"the API server answered {error.status}: {message}"
    if isinstance(error, (HTTPError, OSError, TimeoutError)):
        return "APIUnreachable", f"{type(error).__name__}: {error}"
    return "ReconcileError", f"{type(error).__name__}: {error}"


def retry_delay(failures: int, rng: random.Random | None = None) -> float:
    """Seconds until the next pass after ``failures`` failed passes in a row (1, 2, ...)."""
    step = min(MAX_RETRY_SECONDS, FIRST_RETRY_SECONDS * 2 ** (max(failures, 1) - 1))
    return step * (1 + JITTER * (2 * (rng or random).random() - 1))
