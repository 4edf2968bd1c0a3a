"""Evaluation on the validation file, on the rollout engines, with the run's reward.

Which weights: those of every ``evalIntervalSteps``-th step and of the last step
(``EvalSchedule``), right after the step's weight sync, so the engines hold exactly the
weights being judged. What: the first ``evalMaxPrompts`` prompts of the validation file (file
order, after the maxPromptTokens filter), the same ones every time. How: one greedy completion
per prompt (``evalSamples`` 1), or ``evalSamples`` completions at the run's temperature and topP
with seeds fixed per prompt, so successive evaluations differ by the weights, not by the
sampling noise. A completion passes when its reward is at least ``PASS_REWARD`` (the built-in
rewards give 1 to a correct answer, 0 otherwise).

pass@k is the unbiased estimator of Chen et al. (2021), ``1 - C(n-c, k) / C(n, k)`` for a
prompt with ``c`` of ``n`` completions passing, averaged over prompts; pass@1 is then the mean
pass rate and pass@n the share of prompts with a passing completion.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

from grpo_operator.api.status import EvalFigures
from grpo_operator.api.token_budget import EvalSchedule
from grpo_trainer.data import PromptDataset
from grpo_trainer.rewards.batch import Reward, RewardItem, score_all
from grpo_trainer.rollout.engine import SamplingSettings

PASS_REWARD = 1.0
GREEDY_TEMPERATURE = 0.0  # vLLM decodes greedily at temperature 0


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of ``k`` completions drawn from ``n`` (``c`` passing)
    passes."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@{k} of {c} passing in {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass(frozen=True)
class Evaluation:
    """One evaluation's figures and what it spent."""

    figures: EvalFigures
    prompt_tokens: int
    generated_tokens: int

    def line(self) -> str:
        f = self.figures
        at_k = "" if f.pass_at_k is None else f" pass@{f.samples} {f.pass_at_k:.3f}"
        return (f"eval step {f.step}: reward {f.reward_mean:.3f} pass@1 {f.pass_at_1:.3f}{at_k} "
                f"({f.prompts} prompts x {f.samples}, len {f.response_length_mean:.1f}, "
                f"{f.seconds:.2f}s)")


class Evaluator:
    def __init__(self, dataset: PromptDataset, reward_fn: Reward,
                 schedule: EvalSchedule, samples: int, sampling: SamplingSettings, seed: int):
        self.rows = dataset.rows
        self.reward_fn = reward_fn
        self.schedule = schedule
        self.samples = samples
        self.sampling = sampling
        base = random.Random(f"{seed}/eval").getrandbits(48)
        self.seeds = [base + i * samples for i in range(len(self.rows))]

    @classmethod
    def for_spec(cls, spec, dataset: PromptDataset, reward_fn: Reward) -> Evaluator | None:
        """The evaluator of a ``GRPORunSpec`` on its loaded validation ``dataset`` (None: the
        spec has no validation file)."""
        schedule = EvalSchedule.of(spec)
        if schedule is None:
            return None
        a = spec.algorithm
        rows = dataset.rows[: a.eval_max_prompts] if a.eval_max_prompts else dataset.rows
        greedy = a.eval_samples == 1
        sampling = SamplingSettings(
            group_size=a.eval_samples, max_tokens=a.max_response_tokens,
            temperature=GREEDY_TEMPERATURE if greedy else a.temperature,
            top_p=1.0 if greedy else a.top_p, top_k=None if greedy else a.top_k)
        return cls(PromptDataset(rows, dataset.dropped_too_long), reward_fn, schedule,
                   a.eval_samples, sampling, a.seed)

    def due(self, step: int) -> bool:
        return self.schedule.due(step)

    def run(self, engines, step: int) -> Evaluation:
        """Generate, score and summarise (``engines``: an ``EnginePool`` holding the weights
        of ``step``)."""
        start = time.perf_counter()
        groups = engines.generate([list(r.prompt_ids) for r in self.rows], self.seeds,
                                  self.sampling)
        flat, _failures = score_all(self.reward_fn, [
            RewardItem(c.text, row.ground_truth, row.data_source)
            for row, completions in zip(self.rows, groups, strict=True) for c in completions])
        rewards, passed, at_k, lengths = [], [], [], []
        for i, completions in enumerate(groups):
            scores = flat[i * self.samples : (i + 1) * self.samples]
            c = sum(score >= PASS_REWARD for score in scores)
            rewards += scores
            passed.append(pass_at_k(self.samples, c, 1))
            at_k.append(pass_at_k(self.samples, c, self.samples))
            lengths += [len(completion.token_ids) for completion in completions]
        figures = EvalFigures(
            step=step, prompts=len(self.rows), samples=self.samples,
            reward_mean=sum(rewards) / len(rewards),
            pass_at_1=sum(passed) / len(passed),
            pass_at_k=sum(at_k) / len(at_k) if self.samples > 1 else None,
            response_length_mean=sum(lengths) / len(lengths),
            seconds=time.perf_counter() - start)
        return Evaluation(figures, sum(len(r.prompt_ids) for r in self.rows) * self.samples,
                          sum(lengths))
