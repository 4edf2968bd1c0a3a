"""The driver's exit code, from what the Ray Jobs API says about the ended job.

Ray 2.60 reports the entrypoint's exit code (``driver_exit_code``) for jobs that ended by
themselves (SUCCEEDED, FAILED). A job ended by a stop request is STOPPED with
``driver_exit_code`` None, whatever the entrypoint returned — and a trainer stopped for a
suspension exits SUSPENDED after writing its checkpoint, which the operator must learn. So the
trainer announces its code on the last line of its output (`announce_exit`), and the driver,
which streams that output anyway, picks it up (`ExitMarkerScanner`). The job's log lives on the
head and stays readable after the job ended, so the channel survives a restarted driver pod;
the trainer's report ConfigMap stays the authority on how the run ended.

A job that vanished (a restarted head forgets its jobs), or ended without any code, maps to
RETRYABLE_FAILURE.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import TextIO

from grpo_operator.api.exit_codes import SIGNAL_EXIT_BASE, ExitCode

EXIT_MARKER = "GRPO_TRAINER_EXIT_CODE="
"""Prefix of the line the trainer prints last: ``GRPO_TRAINER_EXIT_CODE=<code>``."""
_MARKER_LINE = re.compile(re.escape(EXIT_MARKER) + r"(\d{1,3})")


def exit_line(code: int) -> str:
    """The line announcing ``code``."""
    if not 0 <= int(code) <= 255:
        raise ValueError(f"exit code out of range: {code}")
    return f"{EXIT_MARKER}{int(code)}"


def announce_exit(code: int, stream: TextIO | None = None) -> None:
    """Print the exit-code line (call it right before exiting with ``code``).

    The line stands alone even if earlier output did not end with a newline.
    """
    stream = stream or sys.stdout
    for s in (sys.stdout, sys.stderr):
        s.flush()
    stream.write(f"\n{exit_line(code)}\n")
    stream.flush()


class ExitMarkerScanner:
    """Finds the last exit-code line in text fed in arbitrary chunks."""

    def __init__(self) -> None:
        self.code: int | None = None
        self._partial = ""

    def feed(self, text: str) -> None:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._match(line)

    def close(self) -> None:
        """Consider a last line that had no newline."""
        self._match(self._partial)
        self._partial = ""

    def _match(self, line: str) -> None:
        found = _MARKER_LINE.fullmatch(line.strip())
        if found and int(found.group(1)) <= 255:
            self.code = int(found.group(1))


@dataclass(frozen=True)
class Outcome:
    """The driver's exit code and why."""

    code: int
    explanation: str


def describe(code: int) -> str:
    try:
        return f"{code} ({ExitCode(code).meaning})"
    except ValueError:
        return str(code)


def decide_exit(status: str | None, driver_exit_code: int | None, announced: int | None) -> Outcome:
    """The exit code for an ended job.

    ``status`` is the terminal JobStatus value (None: the job is gone), ``driver_exit_code``
    Ray's record of the entrypoint's code, ``announced`` the code the trainer printed last.
    """
    if status is None:
        return Outcome(
            ExitCode.RETRYABLE_FAILURE,
            "the job vanished from the Ray head (a restarted head forgets its jobs)",
        )
    if driver_exit_code is not None:
        code = _shell_code(driver_exit_code)
        return Outcome(code, f"the job ended {status}; the trainer exited with {describe(code)}")
    if announced is not None:
        return Outcome(
            announced,
            f"the job ended {status} without an exit code in Ray; the trainer announced "
            f"{describe(announced)}",
        )
    if status == "SUCCEEDED":
        return Outcome(ExitCode.SUCCESS, "the job SUCCEEDED (its entrypoint exited 0)")
    return Outcome(
        ExitCode.RETRYABLE_FAILURE,
        f"the job ended {status} without an exit code (none in Ray, none announced by the "
        "trainer: killed before it could checkpoint, or never started)",
    )


def _shell_code(code: int) -> int:
    """Ray reports -N for an entrypoint killed by signal N; pass it on as a shell would."""
    if code < 0:
        return SIGNAL_EXIT_BASE + (-code)
    return min(code, 255)
