"""Fixtures for the learning tests. The session ones (``tiny_dirs``, ``local_ray``, ONE vLLM
engine ``engines``) live in ``tests/trainer/conftest.py``, shared with the durability tests.

Tests that use the shared engine start their trainer with a weight sync (``Trainer.train``
does), so whatever an earlier test did to the engine's weights is replaced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from grpo_trainer import toy
from grpo_trainer.algorithm_settings import AlgorithmSettings


@pytest.fixture
def make_learners(local_ray, tiny_dirs) -> Iterator[Callable]:
    """``make_learners(world_size, algorithm=AlgorithmSettings(), lr=1e-3, weight_decay=0.0,
    model_dir=the tiny Llama, **settings)`` (``settings``: more ``LearnerSettings`` fields):
    a fresh learner group (no placement group), shut down after the test."""
    from grpo_trainer.learner.actor import LearnerSettings
    from grpo_trainer.learner.group import LearnerGroup
    from grpo_trainer.placement import Slot

    made = []

    def make(world_size=1, algorithm=None, lr=1e-3, weight_decay=0.0, model_dir=None,
             **more):
        settings = LearnerSettings(
            model_dir=str(model_dir or tiny_dirs["model"]),
            algorithm=algorithm or AlgorithmSettings(kl_coef=0.0),
            learning_rate=lr,
            weight_decay=weight_decay,
            seed=0,
            **more,
        )
        group = LearnerGroup(settings, tuple(Slot(1 + r, 0.5) for r in range(world_size)), None)
        made.append(group)
        return group

    yield make
    for group in made:
        group.shutdown()


@pytest.fixture
def prompts(tiny_dirs) -> list[list[int]]:
    """The first 8 training prompts, tokenised as the trainer does."""
    from transformers import AutoTokenizer

    from grpo_trainer.data import load_prompts

    tokenizer = AutoTokenizer.from_pretrained(tiny_dirs["model"])
    dataset = load_prompts(tiny_dirs["data"] / "train.parquet", tokenizer, 32)
    return [list(row.prompt_ids) for row in dataset.rows[:8]]


def generated_batch(engines, prompts, scores=None):
    """A step's batch of ``prompts`` x 4 completions from the engine, scored ``scores`` (by
    default graded 0, 1, 2, varying within each group)."""
    from grpo_trainer.batch import build_batch
    from grpo_trainer.rollout.engine import SamplingSettings

    sampling = SamplingSettings(group_size=4, max_tokens=12)
    groups = engines.generate(prompts, [7 + 4 * i for i in range(len(prompts))], sampling)
    n = sum(len(g) for g in groups)
    scores = scores or [float(i % 3) for i in range(n)]
    return build_batch(prompts, groups, scores, pad_id=0, settings=AlgorithmSettings())


@pytest.fixture
def batch(engines, prompts):
    """8 prompts x 4 completions = 32 sequences (``generated_batch``)."""
    return generated_batch(engines, prompts)


def max_diff(a: dict, b: dict) -> float:
    """The largest absolute difference between two state dicts."""
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture
def make_trainer(tiny_dirs, engines, make_learners) -> Callable:
    """``make_trainer(reward_fn, world_size=1, learner=None, **algorithm)``: a ``Trainer`` on
    the shared engine and fresh learners, configured from a CRD-valid spec (camelCase
    overrides; ``learner``: its spec.learner section)."""
    from transformers import AutoTokenizer

    from grpo_operator.api.spec import GRPORunSpec
    from grpo_trainer.data import load_prompts
    from grpo_trainer.trainer import Trainer, TrainerConfig

    def make(reward_fn, world_size: int = 1, learner: dict | None = None, **algorithm):
        doc = toy.tiny_spec(tiny_dirs["model"], tiny_dirs["data"], tiny_dirs["root"], **algorithm)
        spec = GRPORunSpec.model_validate(doc | {"learner": learner or {}})
        config = TrainerConfig.from_spec(spec)
        tokenizer = AutoTokenizer.from_pretrained(tiny_dirs["model"])
        dataset = load_prompts(
            tiny_dirs["data"] / "train.parquet", tokenizer, spec.algorithm.max_prompt_tokens
        )
        learners = make_learners(world_size, config.algorithm, spec.algorithm.learning_rate,
                                 compute_dtype=spec.learner.dtype.value,
                                 gradient_checkpointing=spec.learner.gradient_checkpointing)
        return Trainer(config, dataset, reward_fn, engines, learners, tokenizer.pad_token_id)

    return make
