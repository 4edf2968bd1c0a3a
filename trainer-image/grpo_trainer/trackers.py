"""Optional W&B and MLflow tracking beside the TensorBoard board, off by default: the run's
environment (``spec.resources.env``) switches each on.

- **W&B** when ``WANDB_PROJECT`` or ``WANDB_MODE`` is set (``WANDB_MODE=disabled`` keeps it
  off): one W&B run per GRPORun, whose id is the run's UID, resumed by every attempt
  (``resume="allow"``), the spec as its config.
- **MLflow** when ``MLFLOW_TRACKING_URI`` is set: one MLflow run per GRPORun, tagged with the
  run's UID (``UID_TAG``); each attempt finds it by that tag and continues it.

Whatever else they need (API key, entity, host, experiment, token) the libraries read from
their own variables. Both get each step's tags and values from ``board.scalars``, so they show
what TensorBoard shows. Each tracker runs on a thread of its own: a slow backend never holds a
step up, and one that fails (its server down, an error returned) is logged once and dropped
for the rest of the attempt. The board, in the caller's thread, is the one that always writes.
The packages (the ``tracking`` extra) are imported only when the environment asks for them;
asked for and missing, the attempt fails before it trains (``InvalidInput``).
"""

from __future__ import annotations

import importlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from grpo_operator.api.report import StepFigures
from grpo_operator.api.run_config import RunConfig
from grpo_trainer.board import CHECKPOINT_TAG, TrainingBoard, scalars
from grpo_trainer.step_metrics import StepMetrics

log = logging.getLogger(__name__)

UID_TAG = "grpo_run_uid"
"""The MLflow tag holding the GRPORun's UID, by which an attempt finds the run to continue."""
CLOSE_SECONDS = 30.0
"""How long the attempt's end waits for the trackers to deliver what they still hold."""


class TrackerUnavailableError(RuntimeError):
    """The environment asks for a tracker whose package this image lacks."""


class Tracker(Protocol):
    """A backend fed the board's records; every call comes from the tracker's own thread."""

    name: str

    def start(self) -> None: ...
    def record(self, metrics: StepMetrics, figures: StepFigures | None) -> None: ...
    def checkpointed(self, step: int, seconds: float) -> None: ...
    def close(self) -> None: ...


def enabled_trackers(config: RunConfig) -> list[Tracker]:
    """The trackers the environment switches on (none by default), not started yet; raises
    ``TrackerUnavailableError`` when one's package is missing."""
    trackers: list[Tracker] = []
    mode = os.environ.get("WANDB_MODE", "")
    if mode != "disabled" and (mode or os.environ.get("WANDB_PROJECT")):
        trackers.append(WandbTracker(config))
    if os.environ.get("MLFLOW_TRACKING_URI"):
        trackers.append(MlflowTracker(config))
    return trackers


class WandbTracker:
    """The GRPORun's W&B run. W&B keeps steps increasing: after a crash, the steps an attempt
    redoes past its checkpoint keep the values logged first."""

    name = "W&B"

    def __init__(self, config: RunConfig):
        self._wandb = _package("wandb", "WANDB_PROJECT or WANDB_MODE")
        self._config = config
        self._run: Any = None

    def start(self) -> None:
        run = self._config.run
        self._run = self._wandb.init(
            project=os.environ.get("WANDB_PROJECT"), name=f"{run.namespace}/{run.name}",
            id=run.uid, resume="allow", config=_spec(self._config))

    def record(self, metrics: StepMetrics, figures: StepFigures | None) -> None:
        self._run.log(scalars(metrics, figures), step=metrics.step)

    def checkpointed(self, step: int, seconds: float) -> None:
        self._run.log({CHECKPOINT_TAG: seconds}, step=step)

    def close(self) -> None:
        self._run.finish()


class MlflowTracker:
    """The GRPORun's MLflow run, in the experiment MLflow's own variables choose. A step an
    attempt redoes after a crash gets a second value at that step. Uses MLflow's fluent API,
    whose active run belongs to the calling thread: the tracker's."""

    name = "MLflow"

    def __init__(self, config: RunConfig):
        self._mlflow = _package("mlflow", "MLFLOW_TRACKING_URI", distribution="mlflow-skinny")
        self._config = config

    def start(self) -> None:
        run = self._config.run
        found = self._mlflow.search_runs(filter_string=f"tags.{UID_TAG} = '{run.uid}'",
                                         max_results=1, output_format="list")
        self._mlflow.start_run(run_id=found[0].info.run_id if found else None,
                               run_name=f"{run.namespace}/{run.name}", tags={UID_TAG: run.uid})

    def record(self, metrics: StepMetrics, figures: StepFigures | None) -> None:
        self._mlflow.log_metrics(scalars(metrics, figures), step=metrics.step)

    def checkpointed(self, step: int, seconds: float) -> None:
        self._mlflow.log_metrics({CHECKPOINT_TAG: seconds}, step=step)

    def close(self) -> None:
        self._mlflow.end_run()


class Sinks:
    """The board and the trackers, with the board's three methods: the board writes in the
    caller's thread (its errors are the attempt's); each tracker gets the same calls, in
    order, on its thread."""

    def __init__(self, board: TrainingBoard, trackers: list[Tracker]):
        self._board = board
        self._threads = [_TrackerThread(t) for t in trackers]
        if trackers:
            log.info("logging to %s besides TensorBoard", " and ".join(t.name for t in trackers))

    @property
    def trackers(self) -> list[str]:
        """The names of the trackers not dropped (yet)."""
        return [t.tracker.name for t in self._threads if not t.failed]

    def record(self, metrics: StepMetrics, figures: StepFigures | None) -> None:
        self._board.record(metrics, figures)
        for thread in self._threads:
            thread.put(thread.tracker.record, metrics, figures)

    def checkpointed(self, step: int, seconds: float) -> None:
        self._board.checkpointed(step, seconds)
        for thread in self._threads:
            thread.put(thread.tracker.checkpointed, step, seconds)

    def close(self) -> None:
        """Close the board, then let the trackers deliver what they hold, within
        ``CLOSE_SECONDS`` for all of them."""
        try:
            self._board.close()
        finally:
            for thread in self._threads:
                thread.put(thread.tracker.close)
                thread.put(None)
            deadline = time.monotonic() + CLOSE_SECONDS
            for thread in self._threads:
                thread.join(deadline - time.monotonic())


class _TrackerThread:
    """One tracker's calls, in order, on a daemon thread (a hung backend never keeps the
    process alive); its first failure drops it."""

    def __init__(self, tracker: Tracker):
        self.tracker = tracker
        self.failed = False
        self._calls: queue.SimpleQueue = queue.SimpleQueue()  # (call, args), None to end
        self._thread = threading.Thread(target=self._run, name=f"tracker-{tracker.name}",
                                        daemon=True)
        self.put(tracker.start)
        self._thread.start()

    def put(self, call: Callable[..., None] | None, *args: Any) -> None:
        if not self.failed:
            self._calls.put(None if call is None else (call, args))

    def join(self, timeout: float) -> None:
        self._thread.join(max(timeout, 0.0))
        if self._thread.is_alive():
            log.warning("%s: still busy after %.0f s; the attempt ends without it",
                        self.tracker.name, CLOSE_SECONDS)

    def _run(self) -> None:
        while (item := self._calls.get()) is not None:
            call, args = item
            try:
                call(*args)
            except Exception as err:  # whatever the backend raises: never the step's failure
                self.failed = True
                log.warning("%s: %s failed, no more logging there in this attempt: %s",
                            self.tracker.name, call.__name__, err)
                return


def _package(module: str, variables: str, distribution: str | None = None) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise TrackerUnavailableError(
            f"{variables} is set, but this trainer image lacks the {distribution or module} "
            f"package (grpo-operator's `tracking` extra): {err}") from err


def _spec(config: RunConfig) -> dict[str, Any]:
    # Without resources.env: a literal value there may be a secret.
    return config.spec.model_dump(mode="json", by_alias=True, exclude_none=True,
                                  exclude={"resources": {"env"}})
