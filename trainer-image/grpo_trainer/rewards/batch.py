"""Scoring many completions at once, and what went wrong while doing it.

The built-in rewards are plain functions ``(completion, ground_truth) -> float`` that never
fail. The user's own (``python``, ``http``) run code the trainer does not control: they score a
whole batch at a time (in worker processes, or in requests to a server), and a completion whose
score cannot be had scores 0 and is counted as an error, a timeout or an invalid value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

RewardFn = Callable[[str, str], float]


@dataclass(frozen=True)
class RewardItem:
    """One completion to score, with its dataset row's ground truth and data source."""

    completion: str
    ground_truth: str
    data_source: str = ""


@dataclass
class RewardFailures:
    """Completions scored 0 because their reward could not be had, by cause."""

    errors: int = 0  # the function raised, its worker died, the request failed
    timeouts: int = 0  # the call or request took longer than reward.timeoutSeconds
    invalid: int = 0  # the value was not a finite number

    def add(self, other: RewardFailures) -> None:
        self.errors += other.errors
        self.timeouts += other.timeouts
        self.invalid += other.invalid

    @property
    def total(self) -> int:
        return self.errors + self.timeouts + self.invalid


@runtime_checkable
class BatchReward(Protocol):
    """A reward that scores batches and may fail (see the module docstring)."""

    def score_batch(self, items: Sequence[RewardItem]) -> tuple[list[float], RewardFailures]:
        """One score per item, in order (0 for a failed one), and the failures."""
        ...

    def close(self) -> None:
        """Release workers and connections."""
        ...


Reward = RewardFn | BatchReward


def score_all(reward: Reward, items: Sequence[RewardItem]) -> tuple[list[float], RewardFailures]:
    """Score ``items`` with a batch reward or, one by one, with a plain function."""
    if isinstance(reward, BatchReward):
        return reward.score_batch(items)
    return [float(reward(i.completion, i.ground_truth)) for i in items], RewardFailures()


def as_score(value: object) -> float | None:
    """A returned value as a score: a finite int, float or bool; None otherwise."""
    if not isinstance(value, int | float):
        return None
    score = float(value)
    return score if math.isfinite(score) else None
