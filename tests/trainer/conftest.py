"""Fixtures for the trainer's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from localcluster.ray_head import RayHead

# Longer than Ray's default (3 s) and than the test trainers' "checkpoints".
RAY_HEAD_JOB_STOP_WAIT_S = 15


@pytest.fixture(scope="session")
def ray_head() -> Iterator[RayHead]:
    """One real local Ray head (token authentication on) for the whole session.

    Stopping it fails the session if any of its processes survives.
    """
    head = RayHead.start(job_stop_wait_s=RAY_HEAD_JOB_STOP_WAIT_S)
    try:
        yield head
    finally:
        head.stop()
