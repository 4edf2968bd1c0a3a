"""Runs that stop before their last step: SIGTERM (suspend), the token budget, a frozen input
that changed under the run."""

from __future__ import annotations

import json
import shutil
import signal

from grpo_operator.api.exit_codes import ExitCode
from grpo_operator.api.report import TrainerState
from grpo_operator.api.run_config import ResumeMode
from grpo_trainer.checkpoint import CheckpointStore

from .conftest import ScriptedReward, sigterm_self

STEP = 4 * 4  # completions per step
WORST_STEP = STEP * 16  # promptsPerStep x groupSize x maxResponseTokens


def test_sigterm_mid_step_suspends_with_a_checkpoint_and_resume_continues(run_attempt, tmp_path):
    handler = signal.getsignal(signal.SIGTERM)
    # A real SIGTERM to this process while step 2 scores its completions.
    run = run_attempt(tmp_path / "uid-s", reward=ScriptedReward(at=STEP + 5, action=sigterm_self),
                      handle_sigterm=True, maxSteps=3)
    assert signal.getsignal(signal.SIGTERM) is handler  # restored
    assert run.code == ExitCode.SUSPENDED
    last = run.last
    assert last.state == TrainerState.SUSPENDED and last.terminal is None
    assert last.recovery.last_checkpoint.step == 1 and last.ledger.completed_steps == 1
    saved = CheckpointStore(run.run_dir, keep=2).newest_valid()
    assert saved.step == 1 and saved.sha256 == last.recovery.last_checkpoint.sha256
    # Step 2 was abandoned after its rollouts: they are in the checkpoint's ledger, sealed.
    state = json.loads((saved.path / "ledgers.json").read_text())["rollout"]
    assert state["weight_version"] == 1
    assert [g["state"] for g in state["groups"]] == ["sealed"] * 4

    resumed = run_attempt(run.run_dir, attempt=2, resume=ResumeMode.LATEST, maxSteps=3)
    assert resumed.code == ExitCode.SUCCESS
    assert [m.step for m in resumed.steps] == [2, 3]
    assert resumed.last.recovery.resumed_from_step == 1
    assert resumed.last.recovery.rollout.reused_groups == 4
    assert resumed.last.recovery.rollout.abandoned_attempts == 0
    assert resumed.last.terminal.artifact.step == 3


def test_a_token_budget_stops_the_run_with_a_checkpoint(run_attempt, tmp_path):
    limit = 2 * WORST_STEP + 100  # two worst-case steps fit, three never
    run = run_attempt(tmp_path / "uid-b", maxSteps=5, spec_patch={
        "budget": {"maxGeneratedTokens": limit, "stopAtLimit": True}})
    assert run.code == ExitCode.BUDGET_EXHAUSTED
    final = run.last
    assert final.terminal.outcome == "Failed" and final.terminal.reason == "BudgetExhausted"
    done = final.ledger.completed_steps
    assert 2 <= done < 5 and len(run.steps) == done
    assert final.ledger.generated_tokens + WORST_STEP > limit  # the next step could overspend
    assert final.ledger.generated_tokens <= limit
    assert final.recovery.last_checkpoint.step == done
    assert CheckpointStore(run.run_dir, keep=2).newest_valid().step == done
    assert not (run.run_dir / "artifact").exists()

    # Without stopAtLimit the whole plan must fit before anything is generated.
    refused = run_attempt(tmp_path / "uid-p", maxSteps=5, spec_patch={
        "budget": {"maxGeneratedTokens": limit}})
    assert refused.code == ExitCode.BUDGET_EXHAUSTED and refused.steps == []
    assert "rest of the plan (5 step(s) x 256 tokens = 1280)" in refused.last.terminal.message


def test_a_dataset_changed_during_the_run_fails_it(run_attempt, tiny_dirs, tmp_path):
    data = shutil.copytree(tiny_dirs["data"], tmp_path / "data")

    def tamper() -> None:
        with open(data / "train.parquet", "ab") as fh:
            fh.write(b"\n")

    run = run_attempt(tmp_path / "uid-f", reward=ScriptedReward(at=1, action=tamper),
                      data_dir=data, maxSteps=1)
    assert run.code == ExitCode.FROZEN_INPUT_CHANGED
    assert run.last.terminal.reason == "FrozenInputChanged"
    assert "train.parquet: size" in run.last.terminal.message
    assert not (run.run_dir / "artifact").exists()
