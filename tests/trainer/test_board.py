"""The TensorBoard event files: one record per step of every figure, read back with
TensorBoard's reader; a resumed attempt's records replace those its predecessor wrote past the
checkpoint."""

from __future__ import annotations

from dataclasses import replace

import pytest

from grpo_trainer.board import TrainingBoard, scalars
from tests.trainer.step_records import STEP, evaluation
from tests.trainer.tensorboard_events import scalars as read_scalars


def test_every_figure_of_a_step_is_one_record_at_that_step(tmp_path):
    board = TrainingBoard(tmp_path, first_step=1)
    for step in (1, 2):
        metrics = replace(STEP, step=step, reward_mean=step / 10, time_update_s=0.5)
        board.record(metrics, metrics.figures())
    board.checkpointed(2, 1.25)
    board.close()
    seen = read_scalars(tmp_path)
    assert seen["reward/mean"] == [(1, pytest.approx(0.1)), (2, pytest.approx(0.2))]
    assert seen["seconds/update"] == [(1, 0.5), (2, 0.5)]
    assert seen["seconds/checkpoint"] == [(2, 1.25)]
    assert seen["train/response_length_max"] == [(1, 6.0), (2, 6.0)]
    assert "kl/reference" not in seen  # klCoef 0: no KL rather than a made-up one
    assert "seconds/old_logprobs" not in seen  # that pass did not run
    # Every figure of the report is there, each under its own tag.
    assert set(seen) == set(scalars(STEP, STEP.figures())) | {"seconds/checkpoint"}


def test_a_resumed_attempt_replaces_the_steps_its_predecessor_wrote_past_the_checkpoint(
        tmp_path):
    first = TrainingBoard(tmp_path, first_step=1)
    for step in (1, 2, 3):  # crashed after step 3; the checkpoint was of step 2
        first.record(replace(STEP, step=step, reward_mean=0.0), None)
    first.close()
    second = TrainingBoard(tmp_path, first_step=3)
    for step in (3, 4):
        second.record(replace(STEP, step=step, reward_mean=1.0), None)
    second.close()
    assert read_scalars(tmp_path)["reward/mean"] == [(1, 0.0), (2, 0.0), (3, 1.0), (4, 1.0)]


def test_an_evaluation_is_recorded_at_the_step_it_scored(tmp_path):
    board = TrainingBoard(tmp_path, first_step=1)
    board.record(replace(STEP, step=1), None)
    board.record(replace(STEP, step=2, evaluation=evaluation(2, 0.25)), None)
    board.close()
    seen = read_scalars(tmp_path)
    assert seen["eval/pass_at_1"] == [(2, 0.25)] and seen["eval/pass_at_k"] == [(2, 0.75)]
    assert {"eval/reward_mean", "eval/prompts", "eval/samples", "eval/seconds",
            "eval/response_length_mean"} <= set(seen)
