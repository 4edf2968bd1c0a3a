"""Shutting the engines down ends, even when an engine is stuck in an earlier call."""

from __future__ import annotations

import threading
import time

import pytest

from grpo_trainer.rollout.pool import close_actors


class Stuck:
    def __init__(self):
        self.release = threading.Event()

    def wait_forever(self) -> None:
        self.release.wait()  # as a join of a weight group whose other side died

    def close(self) -> None:
        pass


def test_a_stuck_actor_is_killed_after_the_close_timeout(local_ray):
    import ray

    stuck = ray.remote(Stuck).remote()
    ray.get(stuck.__ray_ready__.remote())
    blocked = stuck.wait_forever.remote()
    started = time.monotonic()
    close_actors([stuck], timeout=2.0)
    assert time.monotonic() - started < 30
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(blocked, timeout=30)
