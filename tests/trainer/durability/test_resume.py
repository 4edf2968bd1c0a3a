"""Checkpoints and resume on the real engine: a run that crashed after a checkpoint and was
resumed ends exactly where an uninterrupted run does."""

from __future__ import annotations

import json
import shutil

import pytest

from grpo_operator.api.checkpoint_layout import DIGEST_MANIFEST_FILE, parse_latest
from grpo_operator.api.digest import DigestManifest
from grpo_operator.api.exit_codes import ExitCode
from grpo_operator.api.report import TrainerState
from grpo_operator.api.run_config import ResumeMode
from grpo_trainer.checkpoint import CheckpointStore
from grpo_trainer.journal.journal import Journal
from tests.trainer.tensorboard_events import scalars as read_scalars

from .conftest import ScriptedReward, crash

STEP = 4 * 4  # completions (reward calls) per step: promptsPerStep x groupSize
OPTIONS = {"maxSteps": 4, "spec_patch": {"checkpoint": {"intervalSteps": 2, "keep": 2}}}


def test_crash_after_a_checkpoint_then_resume_matches_an_uninterrupted_run(run_attempt, tmp_path):
    # A: uninterrupted, checkpoints at steps 2 and 4.
    a = run_attempt(tmp_path / "uid-a", **OPTIONS)
    assert a.code == ExitCode.SUCCESS and len(a.steps) == 4
    root = a.run_dir
    assert parse_latest((root / "latest").read_text()) == 4
    assert {p.name for p in root.iterdir()} >= {"step_2", "step_4", "latest", "artifact",
                                                "rollouts"}
    step4 = root / "step_4"
    files = {e.path for e in DigestManifest.parse(
        (step4 / DIGEST_MANIFEST_FILE).read_text()).entries}
    assert {"model/config.json", "model/model.safetensors", "model/tokenizer.json",
            "learner/rank_0.pt", "trainer.json", "ledgers.json"} <= files
    ledgers = json.loads((step4 / "ledgers.json").read_text())
    assert ledgers["cost"]["completedSteps"] == 4
    assert ledgers["cost"]["generatedTokens"] == a.last.ledger.generated_tokens > 0
    final = a.last
    assert final.recovery.last_checkpoint.step == 4
    assert final.terminal.artifact.sha256 == DigestManifest.parse(
        (root / "artifact" / DIGEST_MANIFEST_FILE).read_text()).digest
    assert (root / "artifact" / "model.safetensors").read_bytes() == (
        step4 / "model" / "model.safetensors").read_bytes()

    # B: the same run crashes in step 4, after 9 of its 16 completions were sealed
    # (journaled with weight version 3, newer than the step-2 checkpoint).
    b_dir = tmp_path / "uid-b"
    with pytest.raises(RuntimeError, match="injected crash"):
        run_attempt(b_dir, reward=ScriptedReward(at=3 * STEP + 10, action=crash), **OPTIONS)
    assert sorted(p.name for p in b_dir.iterdir() if p.name.startswith("step_")) == ["step_2"]
    newer = [s for s in Journal(b_dir / "rollouts").segments() if s.weight_version == 3]
    discarded_tokens = sum(len(r.tokens) for s in newer for _, r in Journal.read(s)
                           if r.kind == "seal")

    # C: resume. Step 3 reuses the weights-2 completions from the journal (all four groups),
    # step 4 is generated again from the restored optimizer's update: same prompts, same
    # rewards, same final weights as A.
    c = run_attempt(b_dir, attempt=2, resume=ResumeMode.LATEST, **OPTIONS)
    assert c.code == ExitCode.SUCCESS
    assert [m.step for m in c.steps] == [3, 4]
    for resumed, straight in zip(c.steps, a.steps[2:], strict=True):
        assert resumed.prompt_indices == straight.prompt_indices
        assert resumed.scores == straight.scores
    restored = [r for r in c.reports if r.state == TrainerState.STARTING][-1]
    assert restored.recovery.resumed_from_step == 2
    assert restored.recovery.last_checkpoint.step == 2
    reuse = c.last.recovery.rollout
    assert reuse.reused_groups == 4  # step 3, all from the journal
    assert reuse.abandoned_attempts == STEP  # step 4's: 9 sealed (discarded), 7 lost
    assert c.last.attempt == 2 and c.last.ledger.completed_steps == 4
    # Every token generated counts, the discarded ones too.
    assert c.last.ledger.generated_tokens == a.last.ledger.generated_tokens + discarded_tokens
    assert c.last.terminal.artifact.sha256 == a.last.terminal.artifact.sha256

    # The step figures of the reports and the TensorBoard records are the steps' own; B's
    # record of step 3 (past its checkpoint) is replaced by C's, not doubled.
    figures = [r.last_step for r in c.reports if r.last_step is not None]
    assert {f.step for f in figures} == {3, 4}
    assert figures[-1].response_length_max == c.steps[-1].response_length_max > 0
    assert figures[-1].seconds.checkpoint > 0  # step 4 wrote one
    board = read_scalars(b_dir / "tensorboard")
    assert [step for step, _ in board["reward/mean"]] == [1, 2, 3, 4]
    assert [value for _, value in board["reward/mean"]] == pytest.approx(
        [m.reward_mean for m in a.steps])
    assert [step for step, _ in board["seconds/checkpoint"]] == [2, 4]


def test_a_corrupted_newest_checkpoint_is_skipped_and_tmp_is_never_used(run_attempt, tmp_path):
    run = run_attempt(tmp_path / "uid-k", maxSteps=2,
                      spec_patch={"checkpoint": {"intervalSteps": 1, "keep": 2}})
    assert run.code == ExitCode.SUCCESS
    root = run.run_dir
    weights = root / "step_2" / "model" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped bit in the newest checkpoint's weights
    weights.write_bytes(bytes(data))
    shutil.copytree(root / "step_2", root / "step_3.tmp")  # a crash mid-write, never renamed
    (root / "step_3.tmp" / DIGEST_MANIFEST_FILE).unlink()

    resumed = run_attempt(root, attempt=2, resume=ResumeMode.LATEST, maxSteps=2,
                          spec_patch={"checkpoint": {"intervalSteps": 1, "keep": 2}})
    assert resumed.code == ExitCode.SUCCESS
    assert resumed.last.recovery.resumed_from_step == 1
    assert [m.step for m in resumed.steps] == [2]
    assert CheckpointStore(root, keep=2).newest_valid().step == 2  # rewritten, verifies
    assert not (root / "step_3.tmp").exists()
    assert resumed.last.terminal.artifact.sha256 == run.last.terminal.artifact.sha256


def test_an_attempt_after_the_end_reports_the_same_end_again(run_attempt, tmp_path):
    # What makes REPORT_NOT_WRITTEN retryable: when the driver could not write the terminal
    # report, the next attempt resumes from the final checkpoint and reports the end again.
    first = run_attempt(tmp_path / "uid-e", maxSteps=2)
    assert first.code == ExitCode.SUCCESS and first.last.state == TrainerState.FINISHED

    again = run_attempt(first.run_dir, attempt=2, resume=ResumeMode.LATEST, maxSteps=2)

    assert again.code == ExitCode.SUCCESS
    assert again.steps == []  # nothing trained twice
    assert (again.last.attempt, again.last.state) == (2, TrainerState.FINISHED)
    assert again.last.terminal.outcome == "Succeeded"
    assert again.last.terminal.artifact == first.last.terminal.artifact
    assert again.last.ledger.completed_steps == 2
