"""A controller work queue: keys wait until due, a key is queued once however often it is
added (the earliest due time wins), and a key being processed is not handed out twice.

The operator reconciles from this queue instead of kopf daemons or timers: those put a
finalizer on every GRPORun, and a finalizer makes deleting a run hang while the operator is
down. Watch events of a run and of its children enqueue the run at once (echoes of the
operator's own requests excepted); each pass asks to be requeued after an interval for what no
event announces (deadlines, metering, timeouts).
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Hashable


class WorkQueue:
    def __init__(self) -> None:
        self._due: dict[Hashable, float] = {}
        self._heap: list[tuple[float, int, Hashable]] = []
        self._processing: set[Hashable] = set()
        self._again: dict[Hashable, float] = {}
        self._counter = 0
        self._cv = threading.Condition()
        self._closed = False

    def add(self, key: Hashable, delay: float = 0.0) -> None:
        due = time.monotonic() + delay
        with self._cv:
            if key in self._processing:
                # Requeue once the current pass is done.
                self._again[key] = min(due, self._again.get(key, due))
                return
            if key in self._due and self._due[key] <= due:
                return
            self._due[key] = due
            self._counter += 1
            heapq.heappush(self._heap, (due, self._counter, key))
            self._cv.notify()

    def get(self, timeout: float | None = None) -> Hashable | None:
        """The next due key (None on timeout or close)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while not self._closed:
                while self._heap and self._due.get(self._heap[0][2]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded by an earlier due time
                now = time.monotonic()
                if self._heap and self._heap[0][0] <= now:
                    _, _, key = heapq.heappop(self._heap)
                    del self._due[key]
                    self._processing.add(key)
                    return key
                wait = self._heap[0][0] - now if self._heap else None
                if deadline is not None:
                    remaining = deadline - now
                    if remaining <= 0:
                        return None
                    wait = remaining if wait is None else min(wait, remaining)
                self._cv.wait(wait)
            return None

    def done(self, key: Hashable) -> None:
        with self._cv:
            self._processing.discard(key)
            again = self._again.pop(key, None)
        if again is not None:
            self.add(key, max(0.0, again - time.monotonic()))

    def forget(self, key: Hashable) -> None:
        with self._cv:
            self._due.pop(key, None)
            self._again.pop(key, None)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def __len__(self) -> int:
        with self._cv:
            return len(self._due)
