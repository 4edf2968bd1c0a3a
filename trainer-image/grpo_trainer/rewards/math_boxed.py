"""MATH-style answers: the completion's last ``\\boxed{...}`` against the ground truth.

Extraction: the last ``\\boxed`` (or ``\\fbox``) in the completion; its argument is the
brace-balanced ``{...}`` that follows (escaped ``\\{ \\}`` do not count), or, for
``\\boxed 5``, the run of characters up to the next space or ``$``. An unbalanced last box scores
0; an earlier box does not rescue it.

Both sides are normalised, a documented subset of the Hendrycks MATH ``strip_string`` that verl
uses, then compared as strings, or as exact numbers when both are plain numbers or simple
fractions (``0.5`` == ``\\frac{1}{2}`` == ``1/2``, ``1,000`` == ``1000``). A ground truth that
itself holds a ``\\boxed{}`` is reduced to its content first. See ``normalize``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from grpo_trainer.rewards.text import as_text, parse_number

# Longest answer (in characters) extracted or normalised; longer boxes are not answers.
MAX_ANSWER_CHARS = 1000

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_TEXT_WRAPPERS = ("\\text", "\\textbf", "\\textrm", "\\mathrm", "\\mathbf", "\\mbox")
_REMOVED = (
    "\\left",
    "\\right",
    "\\!",
    "\\,",
    "\\;",
    "\\:",
    "\\ ",
    "\\quad",
    "\\qquad",
    "^{\\circ}",
    "^\\circ",
    "\\$",
    "$",
    "\\%",
    "%",
)
_SIMPLE_FRACTION = re.compile(r"(-?)\\frac\{(\d{1,50})\}\{(\d{1,50})\}")
_SLASH_FRACTION = re.compile(r"(-?)(\d{1,50})/(\d{1,50})")


def _balanced(text: str, open_at: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``open_at``, skipping escapes; None if absent."""
    depth = 0
    limit = min(len(text), open_at + MAX_ANSWER_CHARS + 2)
    i = open_at
    while i < limit:
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\boxed x``, or None."""
    start, command = max((text.rfind(c), c) for c in _BOX_COMMANDS)
    if start < 0:
        return None
    i = start + len(command)
    if text.startswith("{", i):
        close = _balanced(text, i)
        return None if close is None else text[i + 1 : close]
    if text.startswith(" ", i):
        rest = text[i : i + MAX_ANSWER_CHARS].lstrip(" ")
        match = re.match(r"[^\s$]+", rest)
        return match.group(0) if match else None
    return None


def _unwrap(s: str, command: str) -> str:
    """``\\text{abc}`` -> ``abc`` for every occurrence of ``command{...}``."""
    out, i = [], 0
    while (j := s.find(command + "{", i)) >= 0:
        close = _balanced(s, j + len(command))
        if close is None:
            break
        out.append(s[i:j])
        out.append(s[j + len(command) + 1 : close])
        i = close + 1
    out.append(s[i:])
    return "".join(out)


def _argument(s: str, i: int) -> tuple[str, int] | None:
    """One TeX argument at ``s[i]``: ``{...}`` or a single character; (text, next index)."""
    if i >= len(s):
        return None
    if s[i] == "{":
        close = _balanced(s, i)
        return None if close is None else (s[i + 1 : close], close + 1)
    return s[i], i + 1


def _fix_fracs(s: str) -> str:
    """``\\frac12`` / ``\\frac1{2}`` / ``\\frac{1}2`` -> ``\\frac{1}{2}``."""
    out, i = [], 0
    while (j := s.find("\\frac", i)) >= 0:
        k = j + len("\\frac")
        first = _argument(s, k)
        second = _argument(s, first[1]) if first else None
        if first is None or second is None or first[0] == "\\" or second[0] == "\\":
            out.append(s[i:k])
            i = k
            continue
        out.append(s[i:j] + "\\frac{" + first[0] + "}{" + second[0] + "}")
        i = second[1]
    out.append(s[i:])
    return "".join(out)


def normalize(answer: str) -> str:
    """Canonical string form of a TeX answer (applied to both completion and ground truth).

    In order: drop newlines; unwrap ``\\text{}``, ``\\textbf{}``, ``\\textrm{}``, ``\\mathrm{}``,
    ``\\mathbf{}``, ``\\mbox{}``; ``\\tfrac``/``\\dfrac`` -> ``\\frac``; drop ``\\left``,
    ``\\right``, ``\\!``, the spacing commands ``\\, \\; \\: \\quad \\qquad`` and ``\\ ``,
    degrees (``^\\circ``), dollars and percent signs; ``{,}`` -> ``,``; drop all whitespace and
    trailing periods; ``x=5`` -> ``5`` when the left side is at most two characters; ``\\sqrt2``
    -> ``\\sqrt{2}``; ``\\frac12`` -> ``\\frac{1}{2}``; an integer ratio ``a/b`` ->
    ``\\frac{a}{b}``; a leading ``.5`` -> ``0.5``.
    """
    s = answer[:MAX_ANSWER_CHARS].replace("\n", "")
    for command in _TEXT_WRAPPERS:
        s = _unwrap(s, command)
    s = s.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac")
    for token in _REMOVED:
        s = s.replace(token, "")
    s = s.replace("{,}", ",")
    s = "".join(s.split()).rstrip(".")
    lhs, sep, rhs = s.partition("=")
    if sep and "=" not in rhs and len(lhs) <= 2:
        s = rhs
    s = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)
    s = _fix_fracs(s)
    if (match := _SLASH_FRACTION.fullmatch(s)) is not None:
        sign, num, den = match.groups()
        s = f"{sign}\\frac{{{num}}}{{{den}}}"
    if s.startswith("."):
        s = "0" + s
    return s


def _as_number(s: str) -> Fraction | None:
    """Exact value of a normalised plain number or simple fraction, else None."""
    if (match := _SIMPLE_FRACTION.fullmatch(s)) is not None:
        sign, num, den = match.groups()
        if int(den) == 0:
            return None
        return Fraction(int(sign + num), int(den))
    return parse_number(s)


def equivalent(answer: str, truth: str) -> bool:
    """Whether two answers agree after ``normalize`` (numerically for plain numbers)."""
    a, b = normalize(answer), normalize(truth)
    if not a or not b:
        return False
    if a == b:
        return True
    x, y = _as_number(a), _as_number(b)
    return x is not None and x == y


@dataclass(frozen=True)
class MathBoxedReward:
    """1.0 when the last ``\\boxed{}`` of the completion matches the ground truth, else 0.0."""

    def __call__(self, completion: Any, ground_truth: Any) -> float:
        answer = last_boxed(as_text(completion))
        if answer is None:
            return 0.0
        truth = as_text(ground_truth)
        boxed_truth = last_boxed(truth)
        if boxed_truth is not None:
            truth = boxed_truth
        return 1.0 if equivalent(answer, truth) else 0.0
