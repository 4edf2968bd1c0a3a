"""Reads a run's TensorBoard event files back with TensorBoard's own reader."""

from __future__ import annotations

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag's (step, value) records as TensorBoard shows them (records an attempt
    wrote past its successor's ``purge_step`` purged)."""
    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)]
            for tag in events.Tags()["scalars"]}
