"""A dense toy reward: the fraction of the completion's letters that equal the ground truth.

For learning tests on tiny random models, where a 0/1 verifiable reward is almost always 0 and
GRPO's advantages would all be 0. The ground truth is one character (case-insensitive); the
score is ``count(letter) / count(letters)`` over the last ``MAX_SCAN_CHARS`` characters, 0 for a
completion without letters. Not one of the CRD's rewards (those are 0/1 verifiers): the trainer
takes it as an explicit ``reward_fn`` (tests, ``make demo``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grpo_trainer.rewards.text import as_text

MAX_SCAN_CHARS = 8192


@dataclass(frozen=True)
class CharFractionReward:
    """Fraction in [0, 1] of alphabetic characters equal to the ground-truth letter."""

    def __call__(self, completion: Any, ground_truth: Any) -> float:
        target = as_text(ground_truth).strip().casefold()
        if len(target) != 1:
            return 0.0
        letters = [c for c in as_text(completion)[-MAX_SCAN_CHARS:].casefold() if c.isalpha()]
        if not letters:
            return 0.0
        return sum(c == target for c in letters) / len(letters)
