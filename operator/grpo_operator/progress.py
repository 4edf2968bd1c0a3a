"""A run's progress as people read it: what the trainer is doing, the share of steps done and
the time left, from the trainer's last report. Pure."""

from __future__ import annotations

import datetime

from grpo_operator.api.report import Report
from grpo_operator.api.status import Ledger, Progress


def shown_progress(report: Report, ledger: Ledger) -> Progress | None:
    """``report``'s progress with the percentage of ``ledger``'s steps and the estimated end."""
    if report.progress is None:
        return None
    left = report.progress.remaining_seconds
    planned = ledger.planned_steps
    return Progress(
        **report.progress.model_dump(),
        percent=ledger.completed_steps * 100 // planned if planned else 0,  # done <= planned
        estimated_completion_time=None if left is None
        else report.time + datetime.timedelta(seconds=round(left)),
        eta=None if left is None else human_duration(left),
    )


def at_rest(progress: Progress | None) -> Progress | None:
    """``progress`` without a time left: the run is not training, so it would only go stale."""
    if progress is None:
        return None
    return progress.model_copy(update={"remaining_seconds": None,
                                       "estimated_completion_time": None, "eta": None})


def human_duration(seconds: float) -> str:
    """Like kubectl's ages: 45s, 3m20s, 2h05m, 3d4h."""
    total = max(0, round(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
