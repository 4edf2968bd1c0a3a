"""Exact match: the whole completion equals the ground truth.

Options: ``strip`` (drop surrounding whitespace on both sides first, default true) and
``case_sensitive`` (default true; false compares ``str.casefold`` forms). An empty ground truth
matches nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grpo_trainer.rewards.text import as_text


def same_text(answer: str, truth: str, case_sensitive: bool, strip: bool) -> bool:
    """Equality under the strip / case options shared with the regex reward.

    An empty ground truth matches nothing: a dataset row without an answer rewards no output.
    """
    if strip:
        answer, truth = answer.strip(), truth.strip()
    if not truth:
        return False
    if not case_sensitive:
        answer, truth = answer.casefold(), truth.casefold()
    return answer == truth


@dataclass(frozen=True)
class ExactMatchReward:
    """1.0 when the completion equals the ground truth under the options, else 0.0."""

    case_sensitive: bool = True
    strip: bool = True

    def __call__(self, completion: Any, ground_truth: Any) -> float:
        answer, truth = as_text(completion), as_text(ground_truth)
        same = same_text(answer, truth, self.case_sensitive, self.strip)
        return 1.0 if same else 0.0
