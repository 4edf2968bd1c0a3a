"""What the operator and recovery parts of ``make bench`` share for their results
(percentiles, figures; tables are ``bench.tables``'), and what every part shares: the machine
it ran on, its load, and the document ``docs/benchmarks.md`` put together."""

from __future__ import annotations

import datetime
import math
import os
import platform
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


def document(command: str, sections: Sequence[str], *, started: datetime.datetime,
             seconds: float, machine_line: str) -> str:
    """docs/benchmarks.md: when, where and how it was measured, then each part's section."""
    head = "\n".join([
        "# Benchmarks",
        "",
        "Written by `make bench` (`hack/bench/`); numbers from one run on one machine, "
        "with the peers measured in the same run.",
        "",
        f"- date: {started:%Y-%m-%d %H:%M} UTC",
        f"- machine: {machine_line}",
        f"- command: `{command}` ({seconds / 60:.1f} min)",
    ])
    return "\n\n".join([head, *(section.strip() for section in sections)]) + "\n"
