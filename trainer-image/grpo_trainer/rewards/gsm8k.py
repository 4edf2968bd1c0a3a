"""GSM8K: the number after the completion's LAST ``####`` must equal the ground truth.

Strict format, as verl's ``gsm8k`` scorer: only a ``#### <number>`` marker counts, and only the
last one (an earlier ``#### 5`` does not rescue a malformed final ``####``). The comparison is
numeric, tolerant of thousands commas, ``$`` and a trailing period: ``#### $1,234.`` matches
``1234``. Text after the number is ignored. A ground truth that itself holds a ``####`` (a full
GSM8K solution) is reduced to its final answer the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from grpo_trainer.rewards.text import MAX_NUMBER_CHARS, as_text, parse_number

MARKER = "####"
# Whitespace, an optional $, then a number; matched on a bounded slice after the marker.
_ANSWER = re.compile(r"\s*(?:\\?\$\s*)?([-+\u2212]?(?:\d[\d,]*(?:\.\d+)?|\.\d+))")


def extract_answer(completion: str) -> str | None:
    """The number written right after the last ``####``, or None."""
    start = completion.rfind(MARKER)
    if start < 0:
        return None
    window = completion[start + len(MARKER) : start + len(MARKER) + 2 * MAX_NUMBER_CHARS]
    match = _ANSWER.match(window)
    return match.group(1) if match else None


@dataclass(frozen=True)
class GSM8KReward:
    """1.0 when the final ``#### number`` equals the numeric ground truth, else 0.0."""

    def __call__(self, completion: Any, ground_truth: Any) -> float:
        answer = extract_answer(as_text(completion))
        if answer is None:
            return 0.0
        truth = as_text(ground_truth)
        if MARKER in truth:
            truth = extract_answer(truth) or ""
        expected, got = parse_number(truth), parse_number(answer)
        return 1.0 if expected is not None and got == expected else 0.0
