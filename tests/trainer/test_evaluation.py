"""Evaluation: the pass@k estimator, and the evaluator on the session's real vLLM engine
(attempts that evaluate: ``durability/test_evaluations.py``)."""

from __future__ import annotations

import itertools

import pytest

from grpo_operator.api.spec import GRPORunSpec
from grpo_trainer import toy
from grpo_trainer.evaluation import Evaluator, pass_at_k


@pytest.mark.parametrize(("n", "c"), [(1, 0), (1, 1), (4, 0), (4, 1), (4, 3), (5, 2), (6, 6)])
def test_pass_at_k_is_the_chance_a_draw_of_k_holds_a_pass(n, c):
    outcomes = [True] * c + [False] * (n - c)
    for k in range(1, n + 1):
        draws = list(itertools.combinations(outcomes, k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(map(any, draws)) / len(draws))
    with pytest.raises(ValueError):
        pass_at_k(n, c, n + 1)


def _evaluator(tiny_dirs, reward, **algorithm) -> Evaluator:
    from transformers import AutoTokenizer

    from grpo_trainer.data import load_prompts

    doc = toy.tiny_spec(tiny_dirs["model"], tiny_dirs["data"], "/c", **algorithm)
    doc["dataset"]["validationFile"] = "test.parquet"
    spec = GRPORunSpec.model_validate(doc)
    tokenizer = AutoTokenizer.from_pretrained(tiny_dirs["model"])
    validation = load_prompts(tiny_dirs["data"] / "test.parquet", tokenizer, 32)
    return Evaluator.for_spec(spec, validation, reward)


class Passes:
    """Passes a completion whose text has an 'a' (about half of the tiny model's), keeping
    every text it scored."""

    def __init__(self):
        self.texts: list[str] = []

    def __call__(self, text: str, truth: str) -> float:
        self.texts.append(text)
        return 1.0 if "a" in text else 0.25


def test_greedy_evaluation_ignores_the_seed_and_its_figures_add_up(tiny_dirs, engines):
    runs = []
    for seed in (0, 1):
        reward = Passes()
        result = _evaluator(tiny_dirs, reward, evalMaxPrompts=6, seed=seed).run(engines, 3)
        runs.append((result, reward.texts))
    (first, texts), (second, texts_again) = runs
    assert texts == texts_again and len(texts) == 6  # greedy: one completion, seed-free
    f = first.figures
    assert (f.step, f.prompts, f.samples, f.pass_at_k) == (3, 6, 1, None)
    passed = sum("a" in t for t in texts)
    assert f.pass_at_1 == pytest.approx(passed / 6)
    assert f.reward_mean == pytest.approx((passed + 0.25 * (6 - passed)) / 6)
    assert first.generated_tokens == pytest.approx(f.response_length_mean * 6)
    assert first.prompt_tokens > 0


def test_sampled_evaluation_reports_pass_at_n(tiny_dirs, engines):
    reward = Passes()
    result = _evaluator(tiny_dirs, reward, evalMaxPrompts=4, evalSamples=3).run(engines, 1)
    f = result.figures
    assert (f.prompts, f.samples, len(reward.texts)) == (4, 3, 12)
    per_prompt = [["a" in t for t in reward.texts[i:i + 3]] for i in range(0, 12, 3)]
    assert f.pass_at_1 == pytest.approx(sum(sum(p) / 3 for p in per_prompt) / 4)
    assert f.pass_at_k == pytest.approx(sum(map(any, per_prompt)) / 4)
    assert len(set(reward.texts)) > 4  # sampled, not greedy
