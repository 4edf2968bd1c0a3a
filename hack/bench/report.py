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
# A marker is a line of its own, so that the markers can be named in a sentence.
_NOTE = re.compile(f"^{re.escape(NOTE_START)}$.*?^{re.escape(NOTE_END)}$", re.S | re.M)


def provenance(command: str, *, started: datetime.datetime, seconds: float,
               machine_line: str) -> str:
    """The line under each section's heading: when, where and how it was measured."""
    return (f"Measured {started:%Y-%m-%d %H:%M} UTC on {machine_line}, with `{command}` "
            f"({seconds / 60:.1f} min for the run).")


def stamped(section: str, line: str) -> str:
    """``section`` with ``line`` under its heading."""
    heading, _, body = section.strip().partition("\n")
    return "\n\n".join(part for part in (heading, line, body.strip()) if part)


def _split(text: str) -> tuple[str, list[str]]:
    """The document's head and its ``## `` sections, in order; a ``## `` line inside a fenced
    code block starts no section."""
    chunks, fenced = [[]], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if line.startswith("## ") and not fenced:
            chunks.append([])
        chunks[-1].append(line)
    head, *sections = ("\n".join(chunk).strip() for chunk in chunks)
    return head, sections


def _heading(section: str) -> str:
    return section.partition("\n")[0].strip()


def _by_heading(sections: Sequence[str], where: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for section in sections:
        heading = _heading(section)
        if not heading.startswith("## "):
            raise ValueError(f"{where}: a section must start with a '## ' heading: {heading!r}")
        if heading in found:
            raise ValueError(f"{where}: two sections named {heading!r}")
        found[heading] = section.strip()
    return found


def notes_in(text: str, where: str) -> list[str]:
    """The notes in ``text``, markers included (each on a line of its own); a marker left
    open or closed twice is an error, not a note silently lost."""
    notes = _NOTE.findall(text)
    lines = [line.strip() for line in text.splitlines()]
    if lines.count(NOTE_START) != len(notes) or lines.count(NOTE_END) != len(notes):
        raise ValueError(f"{where}: a {NOTE_START} without its {NOTE_END}, or the reverse")
    return notes


def sections_of(text: str) -> dict[str, str]:
    """The ``## `` sections of a document by heading, in order."""
    return _by_heading(_split(text)[1], "the document")


def merge(previous: str, fresh: Sequence[str]) -> str:
    """The document to write over ``previous``: each fresh section with the notes
    (``NOTE_START`` ... ``NOTE_END``) its namesake carried, after its own text; the previous
    sections this run did not measure, as they were and where they were; new ones last; the
    notes of the previous head under the new head. Measured figures and the paragraphs
    written by hand about them are never dropped by re-running one part."""
    head, old_sections = _split(previous)
    new = _by_heading(fresh, "this run")
    merged = []
    for heading, old in _by_heading(old_sections, "the previous document").items():
        if heading not in new:
            merged.append(old)
            continue
        merged.append("\n\n".join([new.pop(heading), *notes_in(old, heading)]))
    return document(merged + list(new.values()), head_notes=notes_in(head, "the head"))


def document(sections: Sequence[str], head_notes: Sequence[str] = ()) -> str:
    """docs/benchmarks.md: what it is, then each part's sections."""
    head = "\n".join([
        "# Benchmarks",
        "",
        "Written by `make bench` (`hack/bench/`); each section's numbers are from one run on "
        "one machine, with the peers measured in the same run, and it says when, where and "
        "how. Re-running one part replaces its sections and keeps the others, and the "
        f"paragraphs between `{NOTE_START}` and `{NOTE_END}` stay with their section.",
    ])
    return "\n\n".join([head, *head_notes, *(section.strip() for section in sections)]) + "\n"
