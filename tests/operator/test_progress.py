"""What a run shows of its progress: the trainer's activity, the share of steps done and the
time left from the trainer's pace, dropped once the run is not training."""

from __future__ import annotations

import datetime

import pytest

from grpo_operator.api.constants import TrainerActivity
from grpo_operator.api.report import Report, TrainerState
from grpo_operator.api.status import Ledger, TrainerLedger, TrainerProgress
from grpo_operator.progress import at_rest, human_duration, shown_progress

NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)


def _report(progress: TrainerProgress | None, done: int, planned: int) -> Report:
    return Report(schema_version=1, attempt=1, sequence=3, time=NOW, state=TrainerState.RUNNING,
                  ledger=TrainerLedger(planned_steps=planned, completed_steps=done),
                  progress=progress)


def test_the_time_left_is_the_reports_and_the_percentage_the_ledgers():
    progress = TrainerProgress(activity=TrainerActivity.TRAINING, since=NOW, step_seconds=20.0,
                               remaining_seconds=200.4)
    shown = shown_progress(_report(progress, 3, 13), Ledger(planned_steps=13, completed_steps=3))
    assert (shown.activity, shown.percent, shown.eta) == (TrainerActivity.TRAINING, 23, "3m20s")
    assert shown.estimated_completion_time == NOW + datetime.timedelta(seconds=200)
    assert shown.to_wire()["stepSeconds"] == 20.0


def test_before_the_first_step_there_is_no_time_left_and_no_report_means_no_progress():
    starting = TrainerProgress(activity=TrainerActivity.STARTING_ENGINES, since=NOW)
    shown = shown_progress(_report(starting, 0, 5), Ledger(planned_steps=5))
    assert (shown.percent, shown.eta, shown.estimated_completion_time) == (0, None, None)
    assert shown_progress(_report(None, 0, 5), Ledger(planned_steps=5)) is None


def test_at_rest_keeps_what_was_done_and_drops_the_time_left():
    progress = TrainerProgress(activity=TrainerActivity.CHECKPOINTING, since=NOW,
                               step_seconds=2.0, remaining_seconds=4.0)
    shown = shown_progress(_report(progress, 3, 5), Ledger(planned_steps=5, completed_steps=3))
    rested = at_rest(shown)
    assert (rested.percent, rested.activity, rested.step_seconds) == (
        60, TrainerActivity.CHECKPOINTING, 2.0)
    assert (rested.eta, rested.remaining_seconds, rested.estimated_completion_time) == (
        None, None, None)
    assert at_rest(None) is None


@pytest.mark.parametrize(("seconds", "shown"), [
    (0, "0s"), (44.6, "45s"), (200, "3m20s"), (3600, "1h00m"), (7500, "2h05m"),
    (3 * 86400 + 4 * 3600 + 59, "3d4h"),
])
def test_durations_read_like_kubectl_ages(seconds, shown):
    assert human_duration(seconds) == shown


def test_a_time_left_beyond_ten_years_is_refused():
    with pytest.raises(ValueError):
        TrainerProgress(activity=TrainerActivity.TRAINING, since=NOW, remaining_seconds=1e12)
