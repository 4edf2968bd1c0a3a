"""The trainer's account of what it is doing: Starting until it trains, then Running; each
activity with when it began; the time left paced on the attempt's last steps; the last
evaluations and their tokens."""

from __future__ import annotations

import datetime
import io
from dataclasses import replace
from pathlib import Path

from grpo_operator.api.constants import TrainerActivity
from grpo_operator.api.report import TrainerState, parse_report
from grpo_operator.api.status import MAX_EVALS
from grpo_trainer.checkpoint import SavedCheckpoint
from grpo_trainer.progress import PACE_STEPS, RunProgress
from grpo_trainer.reporting import REPORT_MARKER, Reporter, parse_report_line
from tests.trainer.step_records import STEP, evaluation

NOW = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)


def _reports(out: io.StringIO):
    return [parse_report(parse_report_line(line)[0]) for line in out.getvalue().splitlines()
            if line.startswith(REPORT_MARKER)]


def test_the_trainer_is_starting_until_it_trains_and_says_what_it_does_meanwhile():
    out = io.StringIO()
    progress = RunProgress(Reporter(attempt=1, stream=out), planned_steps=10)
    for activity in (TrainerActivity.VERIFYING_INPUTS, TrainerActivity.RESTORING_CHECKPOINT,
                     TrainerActivity.STARTING_ENGINES, TrainerActivity.TRAINING,
                     TrainerActivity.CHECKPOINTING):
        progress.doing(activity)
    reports = _reports(out)
    assert [(r.state, r.progress.activity) for r in reports] == [
        (TrainerState.STARTING, TrainerActivity.VERIFYING_INPUTS),
        (TrainerState.STARTING, TrainerActivity.RESTORING_CHECKPOINT),
        (TrainerState.STARTING, TrainerActivity.STARTING_ENGINES),
        (TrainerState.RUNNING, TrainerActivity.TRAINING),
        (TrainerState.RUNNING, TrainerActivity.CHECKPOINTING),  # Running from then on
    ]
    assert all(r.progress.remaining_seconds is None for r in reports)  # no step yet
    since = [r.progress.since for r in reports]
    assert since == sorted(since)


def test_the_time_left_follows_the_last_steps_pace():
    out = io.StringIO()
    progress = RunProgress(Reporter(attempt=1, stream=out), planned_steps=20)
    progress.doing(TrainerActivity.TRAINING)
    since = progress.activity_since
    # A slow first step (cold caches), then steady ones: only the last PACE_STEPS count.
    for step, seconds in enumerate([100.0] + [10.0] * PACE_STEPS, start=1):
        progress.record_step(None, replace(STEP, step=step, time_step_s=seconds))
        progress.running()
    last = _reports(out)[-1].progress
    steps_left = 20 - (1 + PACE_STEPS)
    assert (last.step_seconds, last.remaining_seconds) == (10.0, 10.0 * steps_left)
    assert last.since == since  # still the same activity


def test_a_sealed_checkpoint_is_reported_at_once_in_the_current_state():
    out = io.StringIO()
    progress = RunProgress(Reporter(attempt=1, stream=out), planned_steps=3)
    progress.doing(TrainerActivity.TRAINING)
    progress.record_step(None, replace(STEP, step=2))
    progress.sealed(SavedCheckpoint(2, Path("/c/step_2"), "b" * 64, NOW, write_seconds=1.0))
    reports = _reports(out)
    assert len(reports) == 2 and reports[-1].state == TrainerState.RUNNING
    assert reports[-1].recovery.last_checkpoint.step == 2
    assert reports[-1].recovery.last_checkpoint.sha256 == "b" * 64


def test_each_running_report_carries_its_steps_figures_and_its_checkpoints_time():
    out = io.StringIO()
    progress = RunProgress(Reporter(attempt=1, stream=out), planned_steps=3)
    progress.doing(TrainerActivity.TRAINING)
    progress.record_step(None, replace(STEP, step=1, clip_frac_high=0.25, time_update_s=1.5,
                                       time_ref_logprobs_s=0.5, grad_norm=float("inf")))
    progress.checkpoint_held(1, 2.0)
    progress.running()
    progress.record_step(None, replace(STEP, step=2))
    progress.checkpoint_held(1, 3.0)  # an older step's: not step 2's
    progress.running()
    first, second = (r.last_step for r in _reports(out)[1:])
    assert (first.step, first.clip_fraction_high, first.response_length_max) == (1, 0.25, 6)
    assert first.grad_norm is None  # every update skipped: no norm rather than infinity
    assert (first.seconds.update, first.seconds.ref_logprobs, first.seconds.old_logprobs,
            first.seconds.checkpoint) == (1.5, 0.5, None, 2.0)
    assert (second.step, second.seconds.checkpoint, second.grad_norm) == (2, None, 1.0)


def test_a_step_whose_figures_do_not_fit_the_report_costs_the_figures_not_the_step():
    out = io.StringIO()
    progress = RunProgress(Reporter(attempt=1, stream=out), planned_steps=3)
    progress.record_step(None, replace(STEP, step=1, approx_kl=float("nan")))
    progress.running()
    (report,) = [r for r in _reports(out) if r.state == TrainerState.RUNNING]
    assert report.last_step is None and report.ledger.completed_steps == 1


def test_evaluations_are_kept_newest_first_and_their_tokens_apart():
    out = io.StringIO()
    progress = RunProgress(Reporter(attempt=1, stream=out), planned_steps=2 * MAX_EVALS)
    for step in range(1, 2 * MAX_EVALS + 1):
        progress.record_step(None, replace(STEP, step=step, evaluation=(
            evaluation(step, step / 100) if step % 2 == 0 else None)))
    progress.running()
    report = _reports(out)[-1]
    ledger = report.ledger
    assert [e.step for e in ledger.evals] == [10, 8, 6, 4, 2]  # at most MAX_EVALS
    assert ledger.evals[0].pass_at_1 == 0.1
    assert (ledger.eval_prompt_tokens, ledger.eval_generated_tokens) == (5 * 40, 5 * 24)
    assert (ledger.prompt_tokens, ledger.generated_tokens) == (0, 0)  # on_tokens' alone
    assert ledger.budget_tokens == 5 * 24
    assert report.last_step.seconds.eval == 0.25
