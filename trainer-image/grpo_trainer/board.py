"""The run's TensorBoard event files: every figure of every step, under the run's checkpoint
directory (``CheckpointLayout.tensorboard_dir``), kept across attempts.

Each attempt writes a file of its own with ``purge_step`` set to the first step it runs: the
steps an earlier attempt wrote past the checkpoint this one resumed from are redone, and
TensorBoard shows the redone ones in their place (torch's ``SummaryWriter`` resume idiom).
Records are flushed after every step, so a crash loses none that were reported.
"""

from __future__ import annotations

from pathlib import Path

from grpo_operator.api.report import StepFigures
from grpo_trainer.step_metrics import StepMetrics

CHECKPOINT_TAG = "seconds/checkpoint"
"""The checkpoint's write time, at the steps that wrote one (``checkpointed``)."""


def scalars(metrics: StepMetrics, figures: StepFigures | None) -> dict[str, float]:
    """A step's TensorBoard tags and values: rewards, KL and throughput from the step's
    metrics, then the report's figures (``train/<field>``, ``seconds/<phase>``) when it has
    them, and the evaluation's (``eval/<field>``) when one ran."""
    out = {
        "reward/mean": metrics.reward_mean,
        "reward/std": metrics.reward_std,
        "throughput/tokens_per_second": metrics.tokens_per_second,
    }
    if metrics.kl is not None:
        out["kl/reference"] = metrics.kl
    if figures is not None:
        fields = figures.model_dump(exclude_none=True, exclude={"step"})
        seconds = fields.pop("seconds")
        out.update({f"train/{name}": float(value) for name, value in fields.items()})
        out.update({f"seconds/{phase}": value for phase, value in seconds.items()})
    if metrics.evaluation is not None:
        fields = metrics.evaluation.figures.model_dump(exclude_none=True, exclude={"step"})
        out.update({f"eval/{name}": float(value) for name, value in fields.items()})
    return out


class TrainingBoard:
    """One attempt's event file (see the module docstring)."""

    def __init__(self, log_dir: Path, first_step: int):
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(str(log_dir), purge_step=first_step)

    def record(self, metrics: StepMetrics, figures: StepFigures | None) -> None:
        for tag, value in scalars(metrics, figures).items():
            self._writer.add_scalar(tag, value, metrics.step)
        self._writer.flush()

    def checkpointed(self, step: int, seconds: float) -> None:
        self._writer.add_scalar(CHECKPOINT_TAG, seconds, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
