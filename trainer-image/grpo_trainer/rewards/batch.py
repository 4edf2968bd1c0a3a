"""Scoring many completions at once, and what went wrong while doing it.

The built-in rewards are plain functions ``(completion, ground_truth) -> float`` that never
fail. The user's own (``python``, ``http``) run code the trainer does not control: they score a
whole batch at a time (in worker processes, or in requests to a server), and a completion whose
score cannot be had scores 0 and is counted as an error, a timeout or an invalid value.

Scores are streamed (``scored``): each comes out as soon as it is known, in whatever order, so
the trainer seals (journals) every completion the moment it is scored and a crash loses only
what was still being scored.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
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

    def score_stream(self, items: Sequence[RewardItem],
                     failures: RewardFailures) -> Iterator[tuple[int, float]]:
        """``(index, score)`` for every item as soon as it is scored (0 for a failed one,
        counted in ``failures``)."""
        ...

    def close(self) -> None:
        """Release workers and connections."""
        ...


Reward = RewardFn | BatchReward


def scored(reward: Reward, items: Sequence[RewardItem],
           failures: RewardFailures) -> Iterator[tuple[int, float]]:
    """``(index, score)`` of every item as soon as it is known: from a batch reward's stream, or
    from a plain function called item by item."""
    if isinstance(reward, BatchReward):
        yield from reward.score_stream(items, failures)
        return
    for index, item in enumerate(items):
        yield index, float(reward(item.completion, item.ground_truth))


def score_all(reward: Reward, items: Sequence[RewardItem]) -> tuple[list[float], RewardFailures]:
    """Every item's score, in order, and the failures."""
    scores = [0.0] * len(items)
    failures = RewardFailures()
    for index, score in scored(reward, items, failures):
        scores[index] = score
    return scores, failures


def as_score(value: object) -> float | None:
    """A returned value as a score: a finite int, float or bool; None otherwise."""
    if not isinstance(value, int | float):
        return None
    score = float(value)
    return score if math.isfinite(score) else None
