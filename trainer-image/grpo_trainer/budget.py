"""The token budget (``spec.budget.maxGeneratedTokens``) against the cost ledger.

The cost ledger is the report's ``TrainerLedger``: prompt and generated tokens are counted when
a completion is sealed (so work a restart throws away still counts; see ``journal``), optimizer
steps when a step completes; it is saved with every checkpoint and restored on resume.

Admission, before any generation (the operator checks the same at acceptance): without
``stopAtLimit`` the worst case of the rest of the plan must fit, with it one step must fit.
With ``stopAtLimit``, before each step whose worst case (promptsPerStep x groupSize x
maxResponseTokens) could cross the limit, the run stops: checkpoint, terminal report
Failed/BudgetExhausted, exit BUDGET_EXHAUSTED. GPU-hours are metered by the operator.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenBudget:
    limit: int | None  # budget.maxGeneratedTokens
    stop_at_limit: bool
    step_worst_case: int  # tokens one step can generate at most

    @classmethod
    def from_spec(cls, spec) -> TokenBudget:
        """From a contract ``GRPORunSpec``."""
        a = spec.algorithm
        return cls(spec.budget.max_generated_tokens, spec.budget.stop_at_limit,
                   a.prompts_per_step * a.group_size * a.max_response_tokens)

    def refuse_plan(self, generated: int, remaining_steps: int) -> str | None:
        """Why the plan cannot start (None: admitted), ``generated`` tokens already spent."""
        if self.limit is None or remaining_steps <= 0:
            return None
        if self.stop_at_limit:
            need, what = self.step_worst_case, "one step's worst case"
        else:
            need = remaining_steps * self.step_worst_case
            what = f"the worst case of the remaining {remaining_steps} steps"
        if generated + need > self.limit:
            return (f"{what} ({need} generated tokens) does not fit budget.maxGeneratedTokens "
                    f"{self.limit} ({generated} already generated)")
        return None

    def refuse_step(self, generated: int) -> str | None:
        """With stopAtLimit: why the next step must not start (None: it may)."""
        if self.limit is None or not self.stop_at_limit:
            return None
        if generated + self.step_worst_case > self.limit:
            return (f"the next step could generate {self.step_worst_case} tokens, over what "
                    f"is left of budget.maxGeneratedTokens {self.limit} ({generated} "
                    "generated)")
        return None
