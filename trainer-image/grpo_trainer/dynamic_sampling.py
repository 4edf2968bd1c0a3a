"""DAPO's dynamic sampling (``spec.algorithm.dynamicSampling``): which prompt groups a step trains
on.

A group whose completions all scored the same has zero group-relative advantage: it adds no
policy gradient, only tokens to the loss's denominators. After each generation round the step's
sealed groups are judged; while fewer than promptsPerStep have a spread of scores and rounds
remain, the trainer draws another promptsPerStep prompts (the sampler moves on, as verl's
recipe does) and generates them. The step then trains on the first promptsPerStep groups with a
spread, in generation order (verl keeps the first ``train_batch_size`` too); when the rounds ran
out first, the uniform groups fill the rest, in generation order, so the batch keeps its shape
(miniBatchSize divides it) and the shortfall is reported. verl's recipe raises instead when its
rounds run out.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DynamicSampling:
    """One step's selection (``judge`` after each round, then ``chosen``)."""

    prompts_per_step: int
    rounds: int = 1  # generation rounds taken
    spread: list[str] = field(default_factory=list)  # informative group ids, in order
    uniform: list[str] = field(default_factory=list)  # the others, in order

    def judge(self, group_scores: dict[str, list[float]]) -> None:
        """Sort the sealed groups (id -> scores, generation order) by their spread."""
        self.spread = [g for g, scores in group_scores.items() if max(scores) > min(scores)]
        self.uniform = [g for g, scores in group_scores.items() if max(scores) == min(scores)]

    @property
    def full(self) -> bool:
        return len(self.spread) >= self.prompts_per_step

    def chosen(self) -> list[str]:
        """The groups the step trains on, promptsPerStep of them."""
        return (self.spread + self.uniform)[: self.prompts_per_step]

    @property
    def shortfall(self) -> int:
        """Uniform groups among the chosen."""
        return max(0, self.prompts_per_step - len(self.spread))

    @property
    def filtered(self) -> int:
        """Generated groups left out of the step."""
        return len(self.spread) + len(self.uniform) - len(self.chosen())
