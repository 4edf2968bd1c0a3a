"""The token budget (``spec.budget.maxGeneratedTokens``) against the plan's worst case: its
steps and its evaluations. One rule, judged by the operator at acceptance and by the trainer at
the start of every attempt and, with ``stopAtLimit``, before every step.

Worst cases: a step generates at most promptsPerStep x groupSize x maxResponseTokens tokens in
each of its generation rounds (one, or dynamicSampling.maxRounds), an
evaluation at most evalPrompts x evalSamples x maxResponseTokens, where evalPrompts is
evalMaxPrompts or the validation file's row count, whichever is smaller. The operator cannot read
the validation file: without evalMaxPrompts it leaves evaluations out of its check and the
trainer, which knows the file, judges them when it starts.

Without ``stopAtLimit`` the worst case of the whole rest of the plan must fit; with it the
next step and the evaluation that follows it, if one is due, must fit, and the run stops
(checkpoint, Failed/BudgetExhausted) before a step that could cross the limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_operator.api.spec import GRPORunSpec


@dataclass(frozen=True)
class EvalSchedule:
    """When a run evaluates: after every ``interval``-th step, and after its last step."""

    interval: int | None
    max_steps: int

    @classmethod
    def of(cls, spec: GRPORunSpec) -> EvalSchedule | None:
        """The spec's schedule; None without a validation file (no evaluation at all)."""
        if spec.dataset.validation_file is None:
            return None
        return cls(spec.algorithm.eval_interval_steps, spec.algorithm.max_steps)

    def due(self, step: int) -> bool:
        """Whether the weights of ``step`` (steps completed) are evaluated."""
        return step == self.max_steps or bool(self.interval and step % self.interval == 0)

    def count(self, after: int, through: int) -> int:
        """Evaluations after the steps in (after, through]."""
        through = min(through, self.max_steps)
        if through <= after:
            return 0
        periodic = through // self.interval - after // self.interval if self.interval else 0
        last = through == self.max_steps and not (self.interval and through % self.interval == 0)
        return periodic + last


@dataclass(frozen=True)
class TokenBudget:
    limit: int | None  # budget.maxGeneratedTokens
    stop_at_limit: bool
    step_tokens: int  # one step's worst case
    eval_tokens: int  # one evaluation's worst case (0: none, or its size unknown)
    schedule: EvalSchedule | None
    max_steps: int

    @classmethod
    def of(cls, spec: GRPORunSpec, eval_prompts: int | None) -> TokenBudget:
        """``eval_prompts``: the prompts an evaluation scores (None: unknown, not counted)."""
        a = spec.algorithm
        schedule = EvalSchedule.of(spec)
        eval_tokens = 0
        if schedule is not None and eval_prompts is not None:
            eval_tokens = eval_prompts * a.eval_samples * a.max_response_tokens
        return cls(spec.budget.max_generated_tokens, spec.budget.stop_at_limit,
                   a.generation_rounds() * a.prompts_per_step * a.group_size
                   * a.max_response_tokens, eval_tokens,
                   schedule, a.max_steps)

    def worst_case(self, after: int, through: int) -> tuple[int, str]:
        """The most tokens steps (after, through] and their evaluations can generate, and the
        sum spelled out."""
        steps = max(0, min(through, self.max_steps) - after)
        evals = self.schedule.count(after, through) if self.schedule and self.eval_tokens else 0
        total = steps * self.step_tokens + evals * self.eval_tokens
        text = f"{steps} step(s) x {self.step_tokens} tokens"
        if evals:
            text += f" + {evals} evaluation(s) x {self.eval_tokens} tokens"
        return total, f"{text} = {total}"

    def refuse_plan(self, spent: int, step: int) -> str | None:
        """Why the plan cannot start at ``step`` with ``spent`` tokens already generated
        (None: admitted)."""
        if self.limit is None or step >= self.max_steps:
            return None
        if self.stop_at_limit:
            need, sum_ = self.worst_case(step, step + 1)
            what = "one step's worst case"
        else:
            need, sum_ = self.worst_case(step, self.max_steps)
            what = "the worst case of the rest of the plan"
        if spent + need <= self.limit:
            return None
        refusal = (f"{what} ({sum_}) does not fit budget.maxGeneratedTokens {self.limit} "
                   f"({spent} already generated)")
        if not self.stop_at_limit:
            refusal += ("; raise the budget, lower algorithm.maxSteps, or set "
                        "budget.stopAtLimit to stop at the limit")
        return refusal

    def refuse_step(self, spent: int, step: int) -> str | None:
        """With stopAtLimit: why the step after ``step`` must not start (None: it may)."""
        if self.limit is None or not self.stop_at_limit:
            return None
        need, sum_ = self.worst_case(step, step + 1)
        if spent + need <= self.limit:
            return None
        return (f"the next step could generate {sum_} tokens, over what is left of "
                f"budget.maxGeneratedTokens {self.limit} ({spent} generated)")
