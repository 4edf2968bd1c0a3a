"""How an attempt ends when a weight sync is caught wrong: an incomplete sync fails the run
(exit 15, terminal report), a step on stale engine weights ends the attempt retryably (exit 16,
a report carrying ``failure``) and the next attempt gets past it."""

from __future__ import annotations

from grpo_operator.api.constants import Outcome, Reason
from grpo_operator.api.exit_codes import ExitCode
from grpo_operator.api.report import TrainerState
from grpo_operator.api.run_config import ResumeMode

OPTIONS = {"maxSteps": 2, "spec_patch": {"checkpoint": {"intervalSteps": 1}}}


def test_an_incomplete_sync_fails_the_run(run_attempt, tmp_path):
    dropped = "model.norm.weight"
    out = run_attempt(tmp_path / "run", learner_env={"GRPO_TEST_DROP_WEIGHT": dropped},
                      **OPTIONS)
    assert out.code == ExitCode.WEIGHT_SYNC_INCOMPLETE == 15
    assert out.steps == []  # the first sync, before any step, was refused
    assert out.last.state == TrainerState.FINISHED
    terminal = out.last.terminal
    assert terminal.outcome == Outcome.FAILED
    assert terminal.reason == Reason.WEIGHT_SYNC_INCOMPLETE
    assert dropped in terminal.message


def _syncs_once(trainer) -> None:
    """Only the trainer's first sync reaches the engine: after step 1 it is stale."""
    sync, calls = trainer.weights.sync, []

    def first_only() -> None:
        calls.append(None)
        if len(calls) == 1:
            sync()

    trainer.weights.sync = first_only


def test_a_step_on_stale_weights_ends_the_attempt_retryably(run_attempt, tmp_path):
    run_dir = tmp_path / "run"
    out = run_attempt(run_dir, prepare=_syncs_once, **OPTIONS)
    assert out.code == ExitCode.WEIGHT_SYNC_MISMATCH == 16
    assert [m.step for m in out.steps] == [1]
    report = out.last
    assert report.state == TrainerState.RUNNING and report.terminal is None
    assert report.ledger.completed_steps == 1
    assert report.recovery.last_checkpoint.step == 1
    assert report.failure.reason == Reason.WEIGHT_SYNC_MISMATCH
    assert report.failure.message.startswith("step 2: mean |learner - engine| logprob ")
    assert report.failure.message.endswith(" per token over the limit 0.001 "
                                           "(rollout.maxLogprobMismatch)")

    # The next attempt resumes from step 1 and regenerates step 2 from synced weights: the
    # refused step's journaled rollouts are not reused.
    again = run_attempt(run_dir, attempt=2, resume=ResumeMode.LATEST, **OPTIONS)
    assert again.code == ExitCode.SUCCESS
    [step2] = again.steps
    assert step2.step == 2 and step2.logprob_mismatch < 1e-5
    assert again.last.recovery.rollout.reused_groups == 0
