"""DAPO's dynamic sampling on the real engine: groups whose completions all score the same are
left out and more prompts drawn, within the round limit; when the rounds run out the step is
filled and the shortfall reported."""

from __future__ import annotations

import math

from grpo_trainer.rewards.char_fraction import CharFractionReward

G = 4
STEP = {"maxSteps": 1, "promptsPerStep": 8, "groupSize": G, "learningRate": 1e-3}


def _groups(scores):
    return [scores[i : i + G] for i in range(0, len(scores), G)]


class HalfUniform:
    """Every other group (completions are scored group by group, in generation order) gets a
    constant score, the others the dense toy reward: half of each round has no spread."""

    def __init__(self) -> None:
        self.calls = 0
        self.dense = CharFractionReward()

    def __call__(self, text: str, truth: str) -> float:
        group = self.calls // G
        self.calls += 1
        return 0.5 if group % 2 == 0 else self.dense(text, truth)


def test_uniform_groups_are_replaced_by_more_prompts(make_trainer):
    [m] = make_trainer(HalfUniform(), dynamicSampling={"maxRounds": 4}, **STEP).train()
    assert 1 < m.generation_rounds <= 4 and m.shortfall_groups == 0, m.progress_line()
    assert len(m.scores) == 8 * G  # a full step
    assert all(max(g) > min(g) for g in _groups(m.scores))  # every trained group has a spread
    assert m.filtered_groups == 8 * m.generation_rounds - 8  # the rest was left out
    assert len(m.prompt_indices) == 8 * m.generation_rounds  # the sampler moved on
    figures = m.figures()
    assert (figures.generation_rounds, figures.filtered_groups, figures.shortfall_groups) == (
        m.generation_rounds, m.filtered_groups, 0)


def test_when_the_rounds_run_out_the_step_is_filled_and_the_shortfall_reported(make_trainer):
    [m] = make_trainer(lambda text, truth: 1.0, dynamicSampling={"maxRounds": 2},
                       **STEP).train()
    assert (m.generation_rounds, m.shortfall_groups, m.filtered_groups) == (2, 8, 8)
    assert len(m.scores) == 8 * G and set(m.scores) == {1.0}
    assert math.isfinite(m.loss) and m.skipped_steps == 0
