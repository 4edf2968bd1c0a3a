"""A step scored by the user's own Python function in worker processes: the whole step's
completions in one batch, failures scored 0 and counted in the step's figures."""

from __future__ import annotations

from grpo_trainer.rewards.python_reward import PythonReward

# Dense on the toy task (the share of the target letter), but raising for every completion of
# odd length and returning NaN for lengths 2 mod 4: a step's 32 completions surely hold all
# three kinds.
CODE = '''
def score(completion, ground_truth, extra):
    if len(completion) % 2:
        raise ValueError("odd")
    if len(completion) % 4 == 2:
        return float("nan")
    letters = [c for c in completion.lower() if c.isalpha()]
    return sum(c == ground_truth for c in letters) / len(letters) if letters else 0.0
'''


def test_a_step_scores_with_the_users_function_and_counts_its_failures(make_trainer, tmp_path):
    path = tmp_path / "reward.py"
    path.write_text(CODE)
    reward = PythonReward(str(path), "score", timeout_s=10, workers=2)
    try:
        [m] = make_trainer(reward, maxSteps=1, promptsPerStep=8, groupSize=4).train()
    finally:
        reward.close()
    failures = m.reward_failures
    assert failures.errors > 0 and failures.invalid > 0 and failures.timeouts == 0, failures
    assert failures.total < len(m.scores) == 32
    scored = [s for s in m.scores if s > 0]
    assert scored and all(0 < s <= 1 for s in scored)  # the dense reward of the others
    assert sum(s == 0 for s in m.scores) >= failures.total
    figures = m.figures()
    assert (figures.reward_errors, figures.reward_invalid) == (failures.errors, failures.invalid)
