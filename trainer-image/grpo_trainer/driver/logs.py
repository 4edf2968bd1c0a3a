"""Streaming a job's log to the driver's stdout, once, while the main thread watches the job.

Ray's ``tail_job_logs`` is a websocket that sends the log from its beginning and closes once
the job ended and its log was read to the end. ``get_job_logs`` returns the whole log on every
call, so polling it would cost the square of the log's length; it serves only as a last resort
after the job ended. A stream that breaks is reopened; since it restarts from the beginning,
the characters already written are skipped, so every character reaches stdout exactly once.

The stream runs on an asyncio loop in a daemon thread; the main thread never waits for it
without a bound (`finish`). The stream thread sends no requests of its own: whether a cleanly
closed stream means "the job ended" is confirmed by the main thread, which polls the status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Sequence
from typing import TextIO

from grpo_trainer.driver.client import BoundedJobClient, describe_error
from grpo_trainer.driver.outcome import ExitMarkerScanner
from grpo_trainer.driver.relay import ReportRelay

log = logging.getLogger("grpo_trainer.driver")

_MAX_BACKOFF_S = 10.0
# How long a cleanly closed stream waits for the main thread to confirm that the job ended
# before it reopens the stream (the main thread polls every few seconds).
_CONFIRM_TIMEOUT_S = 30.0


class LogFollower:
    """Writes the job's log to ``out``, scans it for the trainer's exit-code line and feeds
    it to ``relays`` (the report ConfigMap, the metrics endpoint)."""

    def __init__(self, client: BoundedJobClient, submission_id: str, out: TextIO,
                 relays: Sequence[ReportRelay] = ()):
        self._client = client
        self._relays = tuple(relays)
        self._id = submission_id
        self._out = out
        self._job_ended = threading.Event()
        self._lock = threading.Lock()
        self._written = 0  # characters of the job's log written to out
        self._scanner = ExitMarkerScanner()
        self._complete = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._thread = threading.Thread(target=self._run, name="job-log", daemon=True)

    @property
    def announced_code(self) -> int | None:
        """The trainer's exit-code line, if one was seen."""
        with self._lock:
            return self._scanner.code

    def start(self) -> None:
        self._thread.start()

    def finish(self, timeout: float) -> bool:
        """The job ended: wait (at most ``timeout``) for the stream to deliver the whole log,
        then stop it. Returns whether the whole log was delivered.
        """
        self._job_ended.set()
        self._complete.wait(timeout)
        loop, task = self._loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(task.cancel)
        self._thread.join(2.0)
        with self._lock:
            self._close_scanners()
        return self._complete.is_set()

    def catch_up(self, whole_log: str) -> None:
        """Write what the stream missed, given the whole log (from ``get_job_logs``)."""
        self._emit(whole_log, 0)
        with self._lock:
            self._close_scanners()

    def _close_scanners(self) -> None:
        self._scanner.close()
        for relay in self._relays:
            relay.close()

    def _emit(self, chunk: str, start: int) -> int:
        """Write the part of ``chunk`` (at offset ``start`` of the log) not yet written."""
        end = start + len(chunk)
        with self._lock:
            if end > self._written:
                new = chunk[max(0, self._written - start):]
                self._out.write(new)
                self._out.flush()
                self._scanner.feed(new)
                for relay in self._relays:
                    relay.feed(new)
                self._written = end
        return end

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._task = loop.create_task(self._follow())
            loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        except Exception:  # the stream is a convenience; the job's status is the authority
            log.exception("log stream of job %s failed", self._id)
        finally:
            loop.close()

    async def _follow(self) -> None:
        backoff = 1.0
        while True:
            offset = 0
            try:
                async for chunk in self._client.tail_job_logs(self._id):
                    offset = self._emit(chunk, offset)
                    backoff = 1.0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    "log stream of job %s interrupted (%s); reopening in %.0fs",
                    self._id, describe_error(exc), backoff,
                )
            else:
                # A clean close means the job ended and its log was read to the end, unless a
                # head going away closed it: wait for the main thread to confirm the end.
                if await self._confirmed_end():
                    self._complete.set()
                    return
            await asyncio.sleep(backoff)
            backoff = min(2 * backoff, _MAX_BACKOFF_S)

    async def _confirmed_end(self) -> bool:
        for _ in range(int(_CONFIRM_TIMEOUT_S / 0.1)):
            if self._job_ended.is_set():
                return True
            await asyncio.sleep(0.1)
        return False
