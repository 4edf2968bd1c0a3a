"""Helpers shared by the rewards: bounded text and lenient number parsing."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

# Longest number (in characters) that is parsed; longer digit runs are not answers.
MAX_NUMBER_CHARS = 100

_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")
_MINUS_SIGN = str.maketrans({"\u2212": "-"})


def as_text(value: Any) -> str:
    """Rewards take text; a dataset may still hand over an int, a float or None."""
    if isinstance(value, str):
        return value
    return "" if value is None else str(value)


def parse_number(text: str) -> Fraction | None:
    """Exact value of a plain decimal number written loosely, else None.

    Tolerates surrounding whitespace, ``$`` (or ``\\$``), commas (dropped, as thousands
    separators), a trailing period and a unicode minus: ``"$1,234."`` -> 1234,
    ``"-0.50"`` -> -1/2. No exponents, fractions or units.
    """
    s = text.strip()
    if len(s) > MAX_NUMBER_CHARS:
        return None
    s = s.translate(_MINUS_SIGN).replace("\\$", "").replace("$", "").replace(",", "")
    s = s.strip().rstrip(".")
    if not _NUMBER.fullmatch(s):
        return None
    return Fraction(s)
