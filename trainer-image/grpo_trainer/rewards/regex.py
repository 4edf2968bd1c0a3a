"""Regex: a named group of the LAST match of a pattern in the completion's tail.

Options: ``pattern`` (required; Python ``re`` syntax with a named group), ``group`` (the group's
name, default ``answer``), ``case_sensitive`` and ``strip`` (as for exact match, applied to the
extracted text and the ground truth). Pattern flags go inline, e.g.
``(?i)answer: (?P<answer>\\S+)``.

An invalid pattern or a missing group is a configuration error raised when the reward is built,
never while scoring. Python's ``re`` has no timeout, so the completion is cut to its last
``MAX_SEARCH_CHARS`` characters (answers come last) to bound backtracking; a pattern with nested
unbounded quantifiers can still be slow, and possessive quantifiers or atomic groups avoid that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from grpo_trainer.rewards.exact_match import same_text
from grpo_trainer.rewards.text import as_text

MAX_SEARCH_CHARS = 8192
MAX_PATTERN_CHARS = 1024


def compile_pattern(pattern: str, group: str) -> re.Pattern[str]:
    """Compile ``pattern`` and check it defines ``group``; ValueError otherwise."""
    if not isinstance(pattern, str) or not pattern:
        raise ValueError("regex reward: 'pattern' must be a non-empty string")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"regex reward: pattern longer than {MAX_PATTERN_CHARS} characters")
    try:
        compiled = re.compile(pattern)
    except re.error as err:
        raise ValueError(f"regex reward: invalid pattern {pattern!r}: {err}") from err
    if group not in compiled.groupindex:
        raise ValueError(
            f"regex reward: pattern {pattern!r} has no named group {group!r} "
            f"(write it as (?P<{group}>...))"
        )
    return compiled


@dataclass(frozen=True)
class RegexReward:
    """1.0 when the named group of the last match equals the ground truth, else 0.0."""

    pattern: re.Pattern[str]
    group: str = "answer"
    case_sensitive: bool = True
    strip: bool = True

    @classmethod
    def build(
        cls, pattern: str, group: str = "answer", case_sensitive: bool = True, strip: bool = True
    ) -> RegexReward:
        """Validate and compile; raises ValueError for a bad pattern or group."""
        return cls(compile_pattern(pattern, group), group, case_sensitive, strip)

    def extract(self, completion: str) -> str | None:
        """The group's text in the last match within the tail of ``completion``, or None."""
        last = None
        for match in self.pattern.finditer(completion[-MAX_SEARCH_CHARS:]):
            last = match
        return None if last is None else last.group(self.group)

    def __call__(self, completion: Any, ground_truth: Any) -> float:
        answer = self.extract(as_text(completion))
        if answer is None:
            return 0.0
        same = same_text(answer, as_text(ground_truth), self.case_sensitive, self.strip)
        return 1.0 if same else 0.0
