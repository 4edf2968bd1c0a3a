"""A failed pass: the reason and message the run's Stalled condition gets, and the backoff."""

from __future__ import annotations

import json
import random

import pytest
from kubernetes.client.rest import ApiException
from urllib3.exceptions import ReadTimeoutError

from grpo_operator.errors import (
    MAX_RETRY_SECONDS,
    SpecInvalid,
    StatusUnreadable,
    describe,
    retry_delay,
)
from grpo_operator.kube import ChildConflict


def api_error(status: int, reason: str, message: str) -> ApiException:
    error = ApiException(status=status, reason="Forbidden" if status == 403 else "Error")
    error.body = json.dumps({"kind": "Status", "reason": reason, "message": message})
    return error


@pytest.mark.parametrize(("error", "reason", "says"), [
    (api_error(403, "Forbidden", 'rayclusters.ray.io "r" is forbidden: exceeded quota: q'),
     "Forbidden", "exceeded quota"),
    (api_error(422, "Invalid", "spec.affinity: Invalid value"), "Invalid", "spec.affinity"),
    (ChildConflict({"kind": "Secret", "metadata": {"name": "r-ray-auth"}}, "u-1"),
     "ChildConflict", "Secret r-ray-auth exists but is controlled by nothing"),
    (StatusUnreadable("status.surprise: extra field"), "StatusUnreadable", "status kept"),
    (SpecInvalid("spec.x: bad"), "SpecInvalid", "spec.x"),
    (ReadTimeoutError(None, "/api", "read timed out"), "APIUnreachable", "timed out"),
    (RuntimeError("boom"), "ReconcileError", "RuntimeError: boom"),
])
def test_a_failure_is_described_by_its_cause(error, reason, says):
    got_reason, message = describe(error)
    assert got_reason == reason and says in message


def test_an_http_phrase_becomes_a_camel_case_reason():
    error = ApiException(status=422, reason="Unprocessable Entity")
    assert describe(error)[0] == "UnprocessableEntity"


def test_retries_back_off_exponentially_with_jitter_up_to_a_cap():
    rng = random.Random(7)
    delays = [retry_delay(n, rng) for n in range(1, 12)]
    assert 4 <= delays[0] <= 6 and 8 <= delays[1] <= 12 and 16 <= delays[2] <= 24
    assert max(delays) <= MAX_RETRY_SECONDS * 1.2
    assert delays[-1] >= MAX_RETRY_SECONDS * 0.8
    assert len({round(retry_delay(3, rng), 3) for _ in range(20)}) > 1  # not in lockstep
