"""The two ways a weight sync can be caught wrong, as exceptions the attempt turns into exit codes
(``attempt.py``): ``WeightSyncIncompleteError`` (15, the run fails) and
``WeightSyncMismatchError`` (16, the next attempt resumes from the checkpoint)."""

from __future__ import annotations

from collections.abc import Sequence

SHOWN_NAMES = 8  # a message names this many parameters, then counts the rest


class WeightSyncIncompleteError(RuntimeError):
    """An engine expected parameters that the sync did not give it: the learner's model and
    the engine's do not match (names, architecture), and a retry would fail the same way."""

    def __init__(self, missing: Sequence[str]) -> None:
        self.missing = tuple(missing)
        shown = ", ".join(self.missing[:SHOWN_NAMES])
        more = len(self.missing) - SHOWN_NAMES
        super().__init__(
            f"the weight sync left {len(self.missing)} engine parameter(s) without a value: "
            f"{shown}" + (f" and {more} more" if more > 0 else "")
        )


class WeightSyncMismatchError(RuntimeError):
    """The step's engine logprobs disagree with the learner's old-policy logprobs beyond
    ``rollout.maxLogprobMismatch``: its rollouts did not come from the learner's weights (a
    stale or corrupted sync), so the step was not trained on."""

    def __init__(self, mismatch: float, limit: float, step: int) -> None:
        self.mismatch, self.limit, self.step = mismatch, limit, step
        super().__init__(
            f"step {step}: mean |learner - engine| logprob {mismatch:.4g} per token over the "
            f"limit {limit:.4g} (rollout.maxLogprobMismatch)"
        )
