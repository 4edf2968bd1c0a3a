"""``reward.name: python``: the user's function, in a pool of worker processes.

Each worker is a fresh interpreter (``spawn``: nothing of the trainer's threads, Ray or torch
state is inherited) that loads the file once and then answers one call at a time:
``function(completion, ground_truth, extra)`` with ``extra = {"data_source": ...}``. The pool
hands each worker one item, waits for answers with a deadline per call, and:

- a call that raises scores 0 (an error; the first message of a batch is logged);
- a worker that dies (the function called ``os._exit``, segfaulted) scores 0 (an error) and is
  replaced;
- a call still running after ``timeout_s`` scores 0 (a timeout): its worker is killed and
  replaced, so a function that hangs never stalls the step past its bound;
- a value that is not a finite number (NaN, None, a string) scores 0 (invalid).

Workers write nothing to the trainer's stdout (the driver reads the trainer's reports there):
their stdout goes to stderr. A file that cannot be loaded (missing, a syntax error, no such
function) is refused when the pool starts, with the reason (``RewardLoadError``).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import sys
import time
from collections import deque
from collections.abc import Iterator, Sequence
from multiprocessing.connection import Connection, wait

from grpo_trainer.rewards.batch import RewardFailures, RewardItem, as_score

log = logging.getLogger("grpo_trainer.rewards")

START_TIMEOUT_S = 60.0  # a worker's interpreter start and the file's import
_MESSAGE_CHARS = 300


class RewardLoadError(Exception):
    """The reward file or function cannot be used (the run's input is invalid)."""


def _worker_main(conn: Connection, path: str, function: str) -> None:
    """A worker's life: load, say ready (or why not), answer calls until told to stop."""
    os.dup2(2, 1)  # keep the trainer's stdout (its report channel) clean
    sys.stdout = sys.stderr
    try:
        import importlib.util

        spec = importlib.util.spec_from_file_location("grpo_user_reward", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"{path} is not a Python file")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn = getattr(module, function, None)
        if not callable(fn):
            raise AttributeError(f"{path} has no function {function!r}")
    except BaseException as err:  # noqa: BLE001 - the user's import may raise anything
        conn.send(("load-error", f"{type(err).__name__}: {err}"[:_MESSAGE_CHARS]))
        return
    conn.send(("ready", None))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        completion, ground_truth, extra = message
        try:
            value = fn(completion, ground_truth, extra)
        except BaseException as err:  # noqa: BLE001 - the user's function may raise anything
            conn.send(("error", f"{type(err).__name__}: {err}"[:_MESSAGE_CHARS]))
            continue
        score = as_score(value)
        conn.send(("ok", score) if score is not None else ("invalid", repr(value)[:80]))


class _Worker:
    def __init__(self, context, path: str, function: str) -> None:
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child, path, function),
                                       daemon=True, name="grpo-reward-worker")
        self.process.start()
        child.close()

    def wait_ready(self, timeout_s: float) -> None:
        if not self.conn.poll(timeout_s):
            self.kill()
            raise RewardLoadError(f"the reward worker did not load the file within "
                                  f"{timeout_s:.0f} s")
        try:
            kind, detail = self.conn.recv()
        except EOFError:
            raise RewardLoadError("the reward worker died while loading the file") from None
        if kind != "ready":
            self.kill()
            raise RewardLoadError(f"cannot load the reward: {detail}")

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.conn.close()


class PythonReward:
    """The pool (see the module docstring): ``workers`` processes, ``timeout_s`` per call."""

    def __init__(self, path: str, function: str = "score", timeout_s: float = 10.0,
                 workers: int = 4, start_timeout_s: float = START_TIMEOUT_S) -> None:
        if not os.path.isfile(path):
            raise RewardLoadError(f"the reward file {path} does not exist")
        self.path, self.function = path, function
        self.timeout_s, self.start_timeout_s = timeout_s, start_timeout_s
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []
        try:
            started = [self._spawn() for _ in range(workers)]
            for worker in started:
                self._workers.append(worker)
                worker.wait_ready(start_timeout_s)
        except BaseException:
            self.close()
            raise

    def _spawn(self) -> _Worker:
        return _Worker(self._context, self.path, self.function)

    def _replace(self, worker: _Worker) -> _Worker:
        worker.kill()
        self._workers.remove(worker)
        fresh = self._spawn()
        self._workers.append(fresh)
        fresh.wait_ready(self.start_timeout_s)
        return fresh

    def score_stream(self, items: Sequence[RewardItem],
                     failures: RewardFailures) -> Iterator[tuple[int, float]]:
        mine = RewardFailures()  # this batch's, added to ``failures`` at its end
        first_error: str | None = None
        pending = deque(enumerate(items))
        idle = list(self._workers)
        busy: dict[Connection, tuple[_Worker, int, float]] = {}
        try:
            while pending or busy:
                while pending and idle:
                    worker = idle.pop()
                    index, item = pending.popleft()
                    worker.conn.send((item.completion, item.ground_truth,
                                      {"data_source": item.data_source}))
                    busy[worker.conn] = (worker, index, time.monotonic() + self.timeout_s)
                soonest = min(deadline for _, _, deadline in busy.values())
                for conn in wait(list(busy), timeout=max(0.0, soonest - time.monotonic())):
                    worker, index, _ = busy.pop(conn)
                    try:
                        kind, value = conn.recv()
                    except (EOFError, OSError):
                        kind, value = "error", "the reward worker died"
                        worker = self._replace(worker)
                    idle.append(worker)
                    if kind == "ok":
                        yield index, value
                        continue
                    if kind == "invalid":
                        mine.invalid += 1
                        first_error = first_error or f"returned {value}, not a finite number"
                    else:
                        mine.errors += 1
                        first_error = first_error or value
                    yield index, 0.0
                now = time.monotonic()
                for conn, (worker, index, deadline) in list(busy.items()):
                    if now >= deadline:
                        del busy[conn]
                        mine.timeouts += 1
                        first_error = first_error or f"a call took over {self.timeout_s:g} s"
                        idle.append(self._replace(worker))
                        yield index, 0.0
        finally:
            failures.add(mine)
            # Abandoned midway (the consumer raised): calls still running would answer the
            # next batch's items; their workers go.
            for worker, _, _ in busy.values():
                self._replace(worker)
        if mine.total:
            log.warning("reward %s:%s: %d of %d completions scored 0 (%d errors, %d timeouts, "
                        "%d invalid), e.g. %s", self.path, self.function, mine.total,
                        len(items), mine.errors, mine.timeouts, mine.invalid, first_error)

    def close(self) -> None:
        for worker in self._workers:
            with contextlib.suppress(OSError):
                worker.conn.send(None)
        deadline = time.monotonic() + 5
        for worker in self._workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
            worker.kill()
        self._workers = []
