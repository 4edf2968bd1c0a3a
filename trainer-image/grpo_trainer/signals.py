"""SIGTERM: finish or abandon the current step, checkpoint, report Suspended, exit 13.

Ray stops a job by sending SIGTERM to the entrypoint and its children, then SIGKILL after
``RAY_JOB_STOP_WAIT_TIME_S`` seconds (3 by default; the operator configures the head with
more). The handler only sets a flag; ``Trainer`` looks at it at its phase boundaries: before a
step (stop), after a step's rollouts (abandon the step: its rollouts are journaled and the
weights are unchanged, so the checkpoint of the current step loses nothing), and never during
the update and weight sync (short; finishing keeps weights and step count consistent).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator

log = logging.getLogger(__name__)


class StopRequest:
    """Set when a stop signal arrives; truthy from then on."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __bool__(self) -> bool:
        return self.signum is not None

    def _handle(self, signum, _frame) -> None:
        if self.signum is None:
            log.warning("received %s: stopping at the next step boundary to checkpoint",
                        signal.Signals(signum).name)
        self.signum = signum

    @contextlib.contextmanager
    def installed(self, signums=(signal.SIGTERM,)) -> Iterator[StopRequest]:
        """Handle ``signums`` while inside (main thread only; Ray's own local-cluster SIGTERM
        handler, installed by ``ray.init``, is replaced meanwhile and restored after)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.signal(s, self._handle) for s in signums}
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
