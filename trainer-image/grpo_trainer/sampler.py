"""A seeded, resumable prompt sampler: epochs of shuffled indices, drawn batch by batch.

Epoch ``e`` is the permutation of ``range(num_rows)`` drawn by ``random.Random(seed, e)``
(derived as ``seed * 1_000_003 + e``), so it is the same on every machine and after a resume. A
batch that runs past the end of an epoch continues with the next epoch's permutation (no row is
dropped, none is repeated within an epoch). ``state_dict()`` is everything a checkpoint needs;
``load_state_dict`` refuses a state made for another dataset size or seed.
"""

from __future__ import annotations

import random
from typing import Any


class PromptSampler:
    """Draws ``batch_size`` row indices per call to ``next_batch``."""

    def __init__(self, num_rows: int, batch_size: int, seed: int) -> None:
        if num_rows < 1 or batch_size < 1:
            raise ValueError(f"need rows and a batch size >= 1, got {num_rows}, {batch_size}")
        self.num_rows = num_rows
        self.batch_size = batch_size
        self.seed = seed
        self.epoch = 0
        self.position = 0  # index into the current epoch's permutation
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(self.num_rows))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def next_batch(self) -> list[int]:
        """The next ``batch_size`` row indices (crossing into the next epoch if needed)."""
        out: list[int] = []
        while len(out) < self.batch_size:
            if self.position == self.num_rows:
                self.epoch += 1
                self.position = 0
                self._order = self._permutation(self.epoch)
            take = min(self.batch_size - len(out), self.num_rows - self.position)
            out.extend(self._order[self.position : self.position + take])
            self.position += take
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "num_rows": self.num_rows,
            "seed": self.seed,
            "epoch": self.epoch,
            "position": self.position,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["num_rows"] != self.num_rows or state["seed"] != self.seed:
            raise ValueError(
                f"sampler state for {state['num_rows']} rows / seed {state['seed']} cannot "
                f"resume a sampler of {self.num_rows} rows / seed {self.seed}"
            )
        if not 0 <= state["position"] <= self.num_rows or state["epoch"] < 0:
            raise ValueError(f"invalid sampler state {state}")
        self.epoch = state["epoch"]
        self.position = state["position"]
        self._order = self._permutation(self.epoch)
