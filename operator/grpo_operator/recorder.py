"""Events posted off the reconcile path, as client-go's event broadcaster posts them: a pass
queues its Events (once its status is written) and one thread posts them in order, so a pass
never waits on an Event's round trip."""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable

from grpo_operator.children.meta import RunRef

log = logging.getLogger(__name__)

# Events waiting to be posted; past it new ones are dropped (client-go's broadcaster drops at
# 1000 too): an Event is best effort, a pass must never block on one.
CAPACITY = 1000

Post = Callable[[RunRef, str, str, str], None]


class EventRecorder:
    def __init__(self, post: Post, capacity: int = CAPACITY):
        self._post = post
        self._queue: queue.Queue[tuple[RunRef, str, str, str] | None] = queue.Queue(capacity)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def record(self, run: RunRef, type_: str, reason: str, message: str) -> None:
        """Queue an Event (the poster starts with the first one)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._drain, name="events",
                                                daemon=True)
                self._thread.start()
        try:
            self._queue.put_nowait((run, type_, reason, message))
        except queue.Full:
            log.warning("event %s/%s dropped: %d are waiting to be posted", reason, run.name,
                        self._queue.qsize())

    def flush(self, timeout: float) -> None:
        """Post what is queued, waiting at most ``timeout`` seconds; then stop."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is None:
            return
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=timeout)
        thread.join(timeout)

    def _drain(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                self._post(*item)
            except Exception as error:  # noqa: BLE001 - the next Event is posted all the same
                log.warning("event %s/%s not recorded: %s", item[2], item[0].name, error)
