"""Checkpoints written beside training: the loop hands a step's state off and goes on to the next
step's generation; a thread seals the checkpoint and announces it once sealed.

Why it stays consistent: the driver's part (trainer state, ledgers, run config) is written in
the loop's thread at the hand-off, so it is the state of the step handed off. The learner ranks
write their own part (model, optimizer, RNG), and a Ray actor runs its calls one at a time, in
order: the next step's update, the first call that changes a rank's state, runs only after the
rank has written. One checkpoint is in flight at a time: the next hand-off, and the attempt's
end, wait for it. A crash while one is in flight leaves its ``.tmp`` directory, which is never
read (``checkpoint.py``): the previous checkpoint stays the newest, and the journal keeps the
rollouts made since.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from grpo_trainer.checkpoint import CheckpointStore, SavedCheckpoint, StartedCheckpoint

log = logging.getLogger(__name__)

Write = Callable[[Path], Callable[[], None]]
"""``write(directory)`` writes what must be captured at the hand-off and returns what must
still finish (e.g. waiting for the learner ranks' writes) before the checkpoint is sealed."""


class CheckpointWriter:
    """Writes one run's checkpoints into ``store``; ``announce(saved)`` is called once each is
    sealed, from the writer's thread (or the caller's, for a checkpoint that existed)."""

    def __init__(self, store: CheckpointStore,
                 announce: Callable[[SavedCheckpoint], None]) -> None:
        self._store = store
        self._announce = announce
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        self._in_flight: Future[SavedCheckpoint] | None = None
        self.newest: SavedCheckpoint | None = None  # the newest this writer announced

    def hand_off(self, step: int, write: Write) -> bool:
        """Start the checkpoint of ``step``, once the one in flight is sealed; False when the
        step's checkpoint existed already (it is announced again, nothing is written)."""
        self.wait()
        started = self._store.begin(step)
        if isinstance(started, SavedCheckpoint):
            self._sealed(started)
            return False
        finish = write(started.directory)
        self._in_flight = self._thread.submit(self._seal, started, finish)
        return True

    def wait(self) -> None:
        """Return once the checkpoint in flight, if any, is sealed and announced; raise what
        writing it raised."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            in_flight.result()

    def close(self) -> None:
        """Wait for the checkpoint in flight and stop the thread. Called on the way out, also
        of a failing attempt: a write that failed as well is logged, not raised over the
        attempt's own error."""
        try:
            self.wait()
        except Exception:
            log.exception("the checkpoint in flight could not be written")
        finally:
            self._thread.shutdown()

    def _seal(self, started: StartedCheckpoint, finish: Callable[[], None]) -> SavedCheckpoint:
        finish()
        return self._sealed(self._store.seal(started))

    def _sealed(self, saved: SavedCheckpoint) -> SavedCheckpoint:
        self.newest = saved
        self._announce(saved)
        return saved
