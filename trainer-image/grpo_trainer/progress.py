"""The run's account of itself while it trains: the cumulative cost ledger (tokens counted as
completions are sealed, evaluations' apart; steps as they complete; the last evaluations), the
recovery section (last checkpoint, resumed step, rollout reuse counts), and the reports that
carry them."""

from __future__ import annotations

import datetime
import logging
import shutil
from collections import deque
from pathlib import Path

from grpo_operator.api.checkpoint_layout import DIGEST_MANIFEST_FILE
from grpo_operator.api.constants import Outcome, Reason, TrainerActivity
from grpo_operator.api.digest import DigestManifest
from grpo_operator.api.report import ReportError, StepFigures, TrainerState
from grpo_operator.api.status import (
    MAX_EVALS,
    MAX_MESSAGE_LENGTH,
    MAX_REMAINING_SECONDS,
    ArtifactRef,
    AttemptFailure,
    CheckpointRef,
    RolloutReuse,
    TrainerLedger,
    TrainerProgress,
    TrainerRecovery,
    TrainerTerminal,
)
from grpo_trainer.reporting import Reporter
from grpo_trainer.step_metrics import StepMetrics

log = logging.getLogger(__name__)

PACE_STEPS = 5
"""The time left is paced on this attempt's last few steps: the first ones run on cold caches,
and response lengths drift as the policy learns."""


class RunProgress:
    def __init__(self, reporter: Reporter, planned_steps: int):
        self.reporter = reporter
        self.ledger = TrainerLedger(planned_steps=planned_steps)
        self.recovery = TrainerRecovery()
        self.rollouts = None  # the RolloutLedger whose counts go into reports
        self.state = TrainerState.STARTING
        self.activity = TrainerActivity.VERIFYING_INPUTS
        self.activity_since = _now()
        self._step_seconds: deque[float] = deque(maxlen=PACE_STEPS)
        self.last_step: StepFigures | None = None

    def doing(self, activity: TrainerActivity) -> None:
        """Say what the trainer is now busy with. The trainer is Starting until it trains,
        then Running (a checkpoint or the artifact included)."""
        if activity != self.activity:
            self.activity, self.activity_since = activity, _now()
        if activity == TrainerActivity.TRAINING:
            self.state = TrainerState.RUNNING
        self._publish(self.state)

    def add_tokens(self, prompt_tokens: int, generated_tokens: int) -> None:
        """Cost ledger: a completion was sealed (the Trainer's ``on_tokens`` hook)."""
        self.ledger.prompt_tokens += prompt_tokens
        self.ledger.generated_tokens += generated_tokens

    def add_spent(self, spent) -> None:
        """Cost ledger: what the journal holds beyond a checkpoint's ledger (``Spent``)."""
        self.add_tokens(spent.prompt_tokens, spent.generated_tokens)
        self.ledger.eval_prompt_tokens += spent.eval_prompt_tokens
        self.ledger.eval_generated_tokens += spent.eval_generated_tokens

    def record_step(self, trainer, metrics: StepMetrics) -> None:
        """After-step hook: the step's figures into the ledger (published by ``running``)."""
        led = self.ledger
        led.completed_steps = metrics.step
        led.reward_mean = metrics.reward_mean
        led.reward_std = metrics.reward_std
        led.kl = metrics.kl
        led.tokens_per_second = metrics.tokens_per_second
        if metrics.evaluation is not None:
            led.eval_prompt_tokens += metrics.evaluation.prompt_tokens
            led.eval_generated_tokens += metrics.evaluation.generated_tokens
            led.evals = [metrics.evaluation.figures, *led.evals][:MAX_EVALS]
        self._step_seconds.append(metrics.time_step_s)
        try:
            self.last_step = metrics.figures()
        except ValueError as err:  # a non-finite loss, say: the report goes without figures
            log.warning("step %d's figures do not fit the report: %s", metrics.step, err)
            self.last_step = None

    def running(self, trainer=None, metrics: StepMetrics | None = None) -> None:
        """After-step hook (last): publish the Running report."""
        self.doing(TrainerActivity.TRAINING)

    def progress(self) -> TrainerProgress:
        pace = sum(self._step_seconds) / len(self._step_seconds) if self._step_seconds else None
        left = self.ledger.planned_steps - self.ledger.completed_steps
        return TrainerProgress(
            activity=self.activity, since=self.activity_since, step_seconds=pace,
            remaining_seconds=None if pace is None else min(pace * left, MAX_REMAINING_SECONDS))

    def checkpointed(self, step: int, path: Path, sha256: str,
                     time: datetime.datetime) -> None:
        """The newest complete checkpoint, named in the next report."""
        self.recovery.last_checkpoint = CheckpointRef(step=step, path=str(path), sha256=sha256,
                                                      time=time)

    def sealed(self, saved) -> None:
        """A checkpoint this attempt wrote is sealed (``SavedCheckpoint``): reported at once.
        Called from the checkpoint writer's thread: it sets only the recovery section's
        checkpoint, and the reporter serialises the report lines; the attempt waits for the
        writer before its terminal report."""
        self.checkpointed(saved.step, saved.path, saved.sha256, saved.time)
        self._publish(self.state)

    def checkpoint_held(self, step: int, seconds: float) -> None:
        """The seconds the checkpoint of ``step`` held the loop: its step's checkpoint figure."""
        last = self.last_step
        if last is not None and last.step == step:
            self.last_step = last.model_copy(update={
                "seconds": last.seconds.model_copy(update={"checkpoint": seconds})})

    def suspended(self) -> None:
        self._publish(TrainerState.SUSPENDED)

    def succeeded(self, artifact: Path, step: int) -> TrainerTerminal:
        terminal = TrainerTerminal(
            outcome=Outcome.SUCCEEDED,
            reason=Reason.COMPLETED,
            message=f"trained {step} steps",
            finished_time=_now(),
            artifact=ArtifactRef(path=str(artifact), step=step, sha256=seal(artifact)),
        )
        self._publish(TrainerState.FINISHED, terminal)
        return terminal

    def failed(self, reason: Reason, message: str) -> None:
        """The run failed for good: the terminal report."""
        terminal = TrainerTerminal(outcome=Outcome.FAILED, reason=reason,
                                   message=_clip(message), finished_time=_now())
        self._publish(TrainerState.FINISHED, terminal)

    def failed_retryably(self, reason: Reason, message: str) -> None:
        """This attempt ends but the run goes on from the checkpoint: a last Running report
        whose ``failure`` says why (the exit code tells the operator to retry)."""
        self._publish(TrainerState.RUNNING,
                      failure=AttemptFailure(reason=reason, message=_clip(message)))

    def _publish(self, state: TrainerState, terminal: TrainerTerminal | None = None,
                 failure: AttemptFailure | None = None) -> None:
        """Publish; a report that cannot be written is logged and skipped (the next one
        carries everything again), never fatal to training."""
        if self.rollouts is not None:
            self.recovery.rollout = RolloutReuse(**self.rollouts.counts.model_dump())
        try:
            self.reporter.publish(state, self.ledger, self.recovery, terminal=terminal,
                                  failure=failure, progress=self.progress(),
                                  last_step=self.last_step)
        except (OSError, ReportError, ValueError) as err:
            log.warning("could not publish the %s report: %s", state, err)


def seal(directory: Path) -> str:
    """Write the digest manifest of ``directory`` into it; return the digest (what a user
    checks with ``python -m grpo_trainer digest --sealed DIR``)."""
    manifest = DigestManifest.for_directory(directory, exclude=[DIGEST_MANIFEST_FILE])
    (directory / DIGEST_MANIFEST_FILE).write_text(manifest.render())
    return manifest.digest


def replace_dir(staging: Path, final: Path) -> None:
    """Move a finished ``staging`` directory to ``final``, replacing an older one."""
    if final.exists():
        shutil.rmtree(final)
    staging.rename(final)


def _clip(message: str) -> str:
    if len(message) > MAX_MESSAGE_LENGTH:
        return message[: MAX_MESSAGE_LENGTH - 3] + "..."
    return message


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)
