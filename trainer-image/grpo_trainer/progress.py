"""The run's account of itself while it trains: the cumulative ledger, reported after every
step, and the terminal report with the artifact's digest at the end."""

from __future__ import annotations

import datetime
import shutil
from pathlib import Path

from grpo_operator.api.checkpoint_layout import DIGEST_MANIFEST_FILE
from grpo_operator.api.constants import Outcome, Reason
from grpo_operator.api.digest import DigestManifest
from grpo_operator.api.report import TrainerState
from grpo_operator.api.status import ArtifactRef, TrainerLedger, TrainerTerminal
from grpo_trainer.reporting import Reporter
from grpo_trainer.step_metrics import StepMetrics


class RunProgress:
    def __init__(self, reporter: Reporter, planned_steps: int):
        self.reporter = reporter
        self.ledger = TrainerLedger(planned_steps=planned_steps)

    def started(self) -> None:
        self.reporter.publish(TrainerState.STARTING, self.ledger)

    def after_step(self, trainer, metrics: StepMetrics) -> None:
        """The trainer's after-step hook."""
        led = self.ledger
        led.completed_steps = metrics.step
        led.prompt_tokens += metrics.prompt_tokens
        led.generated_tokens += metrics.generated_tokens
        led.reward_mean = metrics.reward_mean
        led.reward_std = metrics.reward_std
        led.kl = metrics.kl
        led.tokens_per_second = metrics.tokens_per_second
        self.reporter.publish(TrainerState.RUNNING, led)

    def succeeded(self, artifact: Path, step: int) -> TrainerTerminal:
        terminal = TrainerTerminal(
            outcome=Outcome.SUCCEEDED,
            reason=Reason.COMPLETED,
            message=f"trained {step} steps",
            finished_time=_now(),
            artifact=ArtifactRef(path=str(artifact), step=step, sha256=seal(artifact)),
        )
        self.reporter.publish(TrainerState.FINISHED, self.ledger, terminal=terminal)
        return terminal

    def failed(self, reason: Reason, message: str) -> None:
        terminal = TrainerTerminal(outcome=Outcome.FAILED, reason=reason, message=message,
                                   finished_time=_now())
        self.reporter.publish(TrainerState.FINISHED, self.ledger, terminal=terminal)


def seal(directory: Path) -> str:
    """Write the digest manifest of ``directory`` into it; return the digest (what a user
    checks with ``python -m grpo_trainer digest DIR``)."""
    manifest = DigestManifest.for_directory(directory, exclude=[DIGEST_MANIFEST_FILE])
    (directory / DIGEST_MANIFEST_FILE).write_text(manifest.render())
    return manifest.digest


def replace_dir(staging: Path, final: Path) -> None:
    """Move a finished ``staging`` directory to ``final``, replacing an older one."""
    if final.exists():
        shutil.rmtree(final)
    staging.rename(final)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)
