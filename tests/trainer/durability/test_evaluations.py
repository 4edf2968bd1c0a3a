"""Attempts that evaluate: at the interval and after the last step, every evaluation's tokens
counted apart from training's (one a crash lost too), and the budget's admission counting the
evaluations the validation file implies."""

from __future__ import annotations

import json

import pytest

from grpo_operator.api.exit_codes import ExitCode
from grpo_operator.api.run_config import ResumeMode
from grpo_trainer.journal.journal import Journal

from .conftest import ScriptedReward, crash

EVAL = {"dataset": {"validationFile": "test.parquet"}}


def test_an_attempt_evaluates_at_its_interval_and_counts_a_lost_evaluations_tokens(
        run_attempt, tmp_path):
    options = {"maxSteps": 3, "evalIntervalSteps": 2, "evalMaxPrompts": 4,
               "spec_patch": {**EVAL, "checkpoint": {"intervalSteps": 3}}}
    steps = 4 * 4  # reward calls per step; an evaluation makes 4 more
    # Attempt 1: steps 1 and 2, the evaluation of step 2, then a crash in step 3 (no
    # checkpoint yet: everything is redone, the evaluation's tokens stay spent).
    with pytest.raises(RuntimeError, match="injected crash"):
        run_attempt(tmp_path / "uid", reward=ScriptedReward(at=2 * steps + 4 + 1, action=crash),
                    **options)
    records = [r for s in Journal(tmp_path / "uid" / "rollouts").segments()
               for _, r in Journal.read(s) if r.kind == "eval"]
    assert [r.weight_version for r in records] == [2]
    lost = records[0].generated_tokens
    assert lost > 0

    done = run_attempt(tmp_path / "uid", attempt=2, resume=ResumeMode.LATEST, **options)
    assert done.code == ExitCode.SUCCESS, done.last
    evaluated = {m.step: m.evaluation for m in done.steps if m.evaluation is not None}
    assert sorted(evaluated) == [2, 3]  # the interval, and the last step
    ledger = done.last.ledger
    assert [e.step for e in ledger.evals] == [3, 2]  # newest first
    assert ledger.evals[0] == evaluated[3].figures
    assert ledger.eval_generated_tokens == lost + sum(
        e.generated_tokens for e in evaluated.values())
    assert ledger.eval_prompt_tokens == 3 * evaluated[2].prompt_tokens
    assert ledger.generated_tokens > 0  # training's own, apart
    assert done.last.last_step.seconds.eval == evaluated[3].figures.seconds
    ledgers = json.loads((tmp_path / "uid" / "step_3" / "ledgers.json").read_text())
    assert ledgers["cost"]["evalGeneratedTokens"] == ledger.eval_generated_tokens
    assert len(ledgers["cost"]["evals"]) == 2


def test_the_budget_counts_evaluations_the_validation_file_implies(run_attempt, tmp_path):
    # 2 steps x 4 x 4 x 16 = 512 tokens fit; with 2 evaluations x 16 prompts x 16 tokens
    # (the 16-row validation file, no evalMaxPrompts) they do not.
    outcome = run_attempt(tmp_path / "uid", evalIntervalSteps=1, spec_patch={
        **EVAL, "budget": {"maxGeneratedTokens": 1000}})
    assert outcome.code == ExitCode.BUDGET_EXHAUSTED and not outcome.steps
    assert "2 evaluation(s) x 256 tokens" in outcome.last.terminal.message
