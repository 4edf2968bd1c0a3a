"""The token budget: steps and evaluations against budget.maxGeneratedTokens, and the
evaluation schedule both count on."""

from __future__ import annotations

import pytest

from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.api.token_budget import EvalSchedule, TokenBudget
from tests.operator.api.manifests import base_manifest

STEP = 8 * 4 * 16  # promptsPerStep x groupSize x maxResponseTokens


def spec(limit=None, stop=False, validation=True, **algorithm) -> GRPORunSpec:
    body = base_manifest()["spec"]
    body["algorithm"] |= {"maxSteps": 4, "maxResponseTokens": 16, **algorithm}
    body["budget"] = {"maxGeneratedTokens": limit, "stopAtLimit": stop}
    if not validation:
        del body["dataset"]["validationFile"]
    return GRPORunSpec.model_validate(body)


@pytest.mark.parametrize(("interval", "max_steps", "due"), [
    (None, 4, [4]),
    (2, 4, [2, 4]),
    (3, 4, [3, 4]),
    (1, 3, [1, 2, 3]),
])
def test_evaluations_are_due_at_the_interval_and_after_the_last_step(interval, max_steps, due):
    schedule = EvalSchedule(interval, max_steps)
    assert [s for s in range(1, max_steps + 1) if schedule.due(s)] == due
    for after in range(max_steps + 1):
        for through in range(after, max_steps + 2):
            assert schedule.count(after, through) == sum(after < s <= through for s in due)


def test_no_validation_file_no_schedule():
    assert EvalSchedule.of(spec(validation=False)) is None
    assert EvalSchedule.of(spec(evalIntervalSteps=2)) == EvalSchedule(2, 4)


def test_the_whole_plan_must_fit_without_stop_at_limit():
    assert TokenBudget.of(spec(4 * STEP), None).refuse_plan(0, 0) is None
    refusal = TokenBudget.of(spec(4 * STEP - 1), None).refuse_plan(0, 0)
    assert "4 step(s) x 512 tokens = 2048" in refusal and "stopAtLimit" in refusal
    # resumed at step 3 with 3 steps spent: one step is left
    assert TokenBudget.of(spec(4 * STEP), None).refuse_plan(3 * STEP, 3) is None
    assert TokenBudget.of(spec(4 * STEP), None).refuse_plan(3 * STEP + 1, 3) is not None
    assert TokenBudget.of(spec(1), None).refuse_plan(10**9, 4) is None  # nothing left to do


def test_evaluations_count_in_the_plan_when_their_size_is_known():
    evaluation = 10 * 3 * 16  # prompts x evalSamples x maxResponseTokens
    run = spec(4 * STEP + 2 * evaluation, evalIntervalSteps=2, evalSamples=3)
    assert TokenBudget.of(run, 10).refuse_plan(0, 0) is None
    refusal = TokenBudget.of(run, 11).refuse_plan(0, 0)
    assert "+ 2 evaluation(s) x 528 tokens" in refusal
    assert TokenBudget.of(run, None).refuse_plan(0, 0) is None  # unknown size: not counted
    assert TokenBudget.of(spec(4 * STEP, validation=False), 10**6).refuse_plan(0, 0) is None


def test_stop_at_limit_needs_the_next_step_and_its_evaluation():
    run = spec(2 * STEP + 100, stop=True, evalIntervalSteps=2, evalSamples=1)
    budget = TokenBudget.of(run, 10)  # an evaluation: 160 tokens
    assert budget.refuse_plan(0, 0) is None
    assert budget.refuse_step(STEP, 1) is not None  # step 2 is followed by an evaluation
    assert budget.refuse_step(STEP + 100 - 160, 1) is None
    assert budget.refuse_step(STEP + 100, 0) is None  # step 1 is not
    assert budget.refuse_step(STEP + 101, 0) is not None
    assert TokenBudget.of(spec(None, stop=True), 10).refuse_step(10**9, 0) is None
    assert "one step's worst case" in TokenBudget.of(spec(STEP - 1, stop=True), 0).refuse_plan(
        0, 0)


def test_dynamic_sampling_counts_every_round_of_every_step():
    run = spec(4 * 3 * STEP, dynamicSampling={"maxRounds": 3})
    assert TokenBudget.of(run, None).step_tokens == 3 * STEP
    assert TokenBudget.of(run, None).refuse_plan(0, 0) is None
    refusal = TokenBudget.of(spec(4 * 3 * STEP - 1, dynamicSampling={"maxRounds": 3}),
                             None).refuse_plan(0, 0)
    assert f"4 step(s) x {3 * STEP} tokens" in refusal
