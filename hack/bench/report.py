"""What the operator and recovery parts of ``make bench`` share for their results
(percentiles, figures; tables are ``bench.tables``'), and what every part shares: the machine
it ran on, its load, and the document ``docs/benchmarks.md`` put together from this run's
sections and what the file already held."""

from __future__ import annotations

import datetime
import math
import os
import platform
import re
from collections.abc import Sequence

from bench.tables import MISSING


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100), linearly interpolated between the closest ranks
    (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def number(value: float | None, digits: int = 1) -> str:
    """A figure with fixed decimals, ``MISSING`` for none."""
    return MISSING if value is None else f"{value:.{digits}f}"


def machine() -> str:
    """Cores, memory and CPU model, from /proc."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo
                          if line.startswith("model name")), model)
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{os.cpu_count()} cores, {memory:.0f} GiB memory, {model} "
            f"({platform.system()} {platform.release()}, Python {platform.python_version()})")


def load() -> str:
    """The load averages (1, 5, 15 min), for the reader to judge how busy the machine was."""
    return "load average " + ", ".join(f"{value:.2f}" for value in os.getloadavg())


NOTE_START, NOTE_END = "<!-- note -->", "<!-- /note -->"
_NOTE = re.compile(re.escape(NOTE_START) + r".*?" + re.escape(NOTE_END), re.S)


def provenance(command: str, *, started: datetime.datetime, seconds: float,
               machine_line: str) -> str:
    """The line under each section's heading: when, where and how it was measured."""
    return (f"Measured {started:%Y-%m-%d %H:%M} UTC on {machine_line}, with `{command}` "
            f"({seconds / 60:.1f} min for the run).")


def stamped(section: str, line: str) -> str:
    """``section`` with ``line`` under its heading."""
    heading, _, body = section.strip().partition("\n")
    return "\n\n".join(part for part in (heading, line, body.strip()) if part)


def sections_of(text: str) -> dict[str, str]:
    """The ``## `` sections of a document by heading, in order (what precedes the first is
    the document's head, not a section)."""
    found: dict[str, str] = {}
    for chunk in re.split(r"(?m)^(?=## )", text)[1:]:
        found[chunk.partition("\n")[0].strip()] = chunk.strip()
    return found


def merge(previous: str, fresh: Sequence[str]) -> list[str]:
    """The sections to write when ``previous`` is on disk: each fresh section with the notes
    (``NOTE_START`` ... ``NOTE_END``) its namesake carried, after its own text; the previous
    sections this run did not measure, as they were and where they were; new ones last.
    Measured figures and the paragraphs written by hand about them are never dropped by
    re-running one part."""
    new = {section.strip().partition("\n")[0].strip(): section.strip() for section in fresh}
    merged = []
    for heading, old in sections_of(previous).items():
        if heading not in new:
            merged.append(old)
            continue
        notes = _NOTE.findall(old)
        merged.append("\n\n".join([new.pop(heading), *notes]))
    return merged + list(new.values())


def document(sections: Sequence[str]) -> str:
    """docs/benchmarks.md: what it is, then each part's sections."""
    head = "\n".join([
        "# Benchmarks",
        "",
        "Written by `make bench` (`hack/bench/`); numbers from one run on one machine, "
        "with the peers measured in the same run. Each section says when, where and how it "
        "was measured; re-running one part replaces its sections and keeps the others, and "
        f"the paragraphs between `{NOTE_START}` and `{NOTE_END}` stay with their section.",
    ])
    return "\n\n".join([head, *(section.strip() for section in sections)]) + "\n"
