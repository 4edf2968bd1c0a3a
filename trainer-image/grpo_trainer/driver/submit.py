"""Submit one attempt's trainer through the Ray Jobs API, follow it, stop it on SIGTERM.

The phases, each bounded:

1. connect: reach the head's Jobs API (``connect_timeout``);
2. fence: stop running jobs of the run's earlier attempts (a driver pod that vanished leaves
   its trainer running; two trainers must never share the checkpoint directory), and refuse
   to run when a later attempt exists (this driver is stale);
3. submit or attach: look the submission id ``<run>-a<N>`` up first; submit only if it does not
   exist; after a failed or unanswered submit look it up again — Ray refuses a second job with
   the same id, so there is never more than one job per attempt (``submit_timeout``);
4. follow: stream the log to stdout and poll the status until the job ended (``lost_timeout``
   bounds how long the head may stay unreachable);
5. on SIGTERM (or SIGINT): ask Ray to stop the job (the trainer gets SIGTERM and checkpoints;
   the head's RAY_JOB_STOP_WAIT_TIME_S bounds that) and keep following (``stop_timeout``);
6. exit with the trainer's code (`outcome.decide_exit`), once a terminal report whose write
   failed was retried (`relay.ReportRelay.settle`); if it still is not written, exit
   REPORT_NOT_WRITTEN instead, unless the trainer's code ends the run by itself.
"""

from __future__ import annotations

import logging
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TextIO, TypeVar

from ray.exceptions import AuthenticationError

from grpo_operator.api.exit_codes import NON_RETRYABLE_EXIT_CODES, ExitCode
from grpo_trainer.driver import settings
from grpo_trainer.driver.client import (
    BoundedJobClient,
    DriverError,
    JobsApiError,
    auth_error,
    connect,
    describe_error,
    is_transient,
)
from grpo_trainer.driver.logs import LogFollower
from grpo_trainer.driver.outcome import Outcome, decide_exit, describe
from grpo_trainer.driver.relay import ReportRelay

log = logging.getLogger("grpo_trainer.driver")
T = TypeVar("T")


@dataclass(frozen=True)
class Timeouts:
    """Bounds on every wait, in seconds (see `settings` for the defaults)."""

    connect: float = settings.DEFAULT_CONNECT_TIMEOUT_S
    request: float = settings.DEFAULT_REQUEST_TIMEOUT_S
    submit: float = settings.DEFAULT_SUBMIT_TIMEOUT_S
    lost: float = settings.DEFAULT_LOST_TIMEOUT_S
    stop: float = settings.RAY_DEFAULT_JOB_STOP_WAIT_S + settings.STOP_SLACK_S
    poll: float = settings.DEFAULT_POLL_INTERVAL_S
    drain: float = settings.LOG_DRAIN_TIMEOUT_S


@dataclass(frozen=True)
class Submission:
    """What to submit, and where."""

    address: str
    token_file: Path | None
    run_name: str
    run_uid: str
    attempt: int
    config_json: bytes
    entrypoint: str = settings.DEFAULT_ENTRYPOINT
    timeouts: Timeouts = field(default_factory=Timeouts)

    @property
    def submission_id(self) -> str:
        return settings.submission_id(self.run_name, self.attempt)

    @property
    def metadata(self) -> dict[str, str]:
        return {
            settings.METADATA_RUN: self.run_name,
            settings.METADATA_RUN_UID: self.run_uid,
            settings.METADATA_ATTEMPT: str(self.attempt),
        }


class Driver:
    """Runs one submission to its end; `run` returns the exit code."""

    def __init__(self, submission: Submission, out: TextIO | None = None,
                 relays: Sequence[ReportRelay] = ()):
        self.s = submission
        self.relays = tuple(relays)
        self.t = submission.timeouts
        self.out = out or sys.stdout
        self._stop_requested = threading.Event()
        self._stop_deadline: float | None = None

    # --- entry point ----------------------------------------------------------------------------

    def run(self) -> int:
        """Submit or attach, follow, and return the exit code (never raises DriverError)."""
        previous = self._install_signal_handlers()
        try:
            outcome = self._run()
        except DriverError as exc:
            log.error("%s", exc)
            return exc.code
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        log.info("%s: exit %d", outcome.explanation, outcome.code)
        return outcome.code

    def _run(self) -> Outcome:
        sid = self.s.submission_id
        client = connect(
            self.s.address, self.s.token_file,
            timeout=self.t.connect, request_timeout=self.t.request,
            give_up=self._stop_requested.is_set,
        )
        log.info("connected to the Ray head at %s; attempt %d is job %s",
                 self.s.address, self.s.attempt, sid)
        self._fence(client)
        if not self._submit_or_attach(client):
            raise DriverError(f"stopped before job {sid} was submitted; nothing ran")
        return self._follow(client)

    # --- signals ---------------------------------------------------------------------------------

    def _install_signal_handlers(self) -> dict[int, object]:
        if threading.current_thread() is not threading.main_thread():
            return {}  # signal handlers can only be set from the main thread

        def on_signal(signum, _frame):
            # Only set a flag: the main loop notices it within one poll interval (or one
            # request timeout) and acts outside the handler.
            self._stop_requested.set()

        return {
            signum: signal.signal(signum, on_signal) for signum in (signal.SIGTERM, signal.SIGINT)
        }

    def _pause(self, seconds: float) -> None:
        """Sleep, waking early on the first stop request."""
        if self._stop_requested.is_set():
            time.sleep(seconds)
        else:
            self._stop_requested.wait(seconds)

    # --- phases ----------------------------------------------------------------------------------

    def _fence(self, client: BoundedJobClient) -> None:
        """Stop running jobs of earlier attempts of this run; refuse if a later attempt exists."""
        jobs = self._call(client.list_jobs, what="listing jobs",
                          deadline=time.monotonic() + self.t.submit)
        earlier = []
        for job in jobs:
            meta = job.metadata or {}
            if meta.get(settings.METADATA_RUN_UID) != self.s.run_uid:
                continue
            try:
                attempt = int(meta.get(settings.METADATA_ATTEMPT, ""))
            except ValueError:
                continue
            if attempt > self.s.attempt:
                raise DriverError(
                    f"job {job.submission_id} of a later attempt ({attempt}) exists on the head; "
                    f"this driver (attempt {self.s.attempt}) is stale and submits nothing"
                )
            if attempt < self.s.attempt and not job.status.is_terminal():
                earlier.append(job.submission_id)
        if not earlier:
            return
        log.warning("stopping jobs of earlier attempts still running: %s", ", ".join(earlier))
        deadline = time.monotonic() + self.t.stop
        for old in earlier:
            self._ignoring_gone(partial(client.stop_job, old), f"stopping job {old}", deadline)
        for old in earlier:
            ended = partial(_has_ended, client, old)
            while not self._ignoring_gone(ended, f"looking up job {old}", deadline):
                if time.monotonic() > deadline:
                    raise DriverError(
                        f"job {old} of an earlier attempt did not stop within {self.t.stop:g}s"
                    )
                time.sleep(min(self.t.poll, 1.0))

    def _ignoring_gone(self, call: Callable[[], T], what: str, deadline: float) -> T | bool:
        """``call()`` via `_call`; True if the job is gone (404) meanwhile."""
        try:
            return self._call(call, what=what, deadline=deadline)
        except JobsApiError as exc:
            if exc.status == 404:
                return True
            raise DriverError(f"{what}: the Ray head answered {exc}") from None

    def _submit_or_attach(self, client: BoundedJobClient) -> bool:
        """Make sure the attempt's job exists; False if stopped before anything was submitted."""
        sid = self.s.submission_id
        deadline = time.monotonic() + self.t.submit
        last_failure = None
        while True:
            job = self._lookup(client, deadline)
            if job is not None:
                owner = (job.metadata or {}).get(settings.METADATA_RUN_UID)
                if owner != self.s.run_uid:
                    raise DriverError(
                        f"job {sid} on the head belongs to another run (uid {owner}, this run "
                        f"is {self.s.run_uid}); refusing to attach"
                    )
                if last_failure is None:
                    log.info("job %s already exists (%s): attaching to it", sid, job.status)
                return True
            if self._stop_requested.is_set():
                return False
            if time.monotonic() > deadline:
                raise DriverError(f"could not submit job {sid} within {self.t.submit:g}s "
                                  f"(last error: {last_failure})")
            try:
                self._submit(client)
            except AuthenticationError as exc:
                raise auth_error(exc, self.s.address, self.s.token_file) from None
            except Exception as exc:
                if isinstance(exc, JobsApiError) and not is_transient(exc):
                    raise DriverError(f"the Ray head refused job {sid}: {exc}") from None
                if not is_transient(exc):
                    raise
                # Unanswered, or refused because it exists (Ray answers 500 for that): the
                # lookup decides.
                last_failure = describe_error(exc)
                log.warning("submitting job %s: %s; looking it up again", sid, last_failure)
                self._pause(1.0)
            else:
                log.info("submitted job %s: %s", sid, self.s.entrypoint)
                return True

    def _submit(self, client: BoundedJobClient) -> None:
        # The run config travels with the job as its working_dir (see settings).
        with tempfile.TemporaryDirectory(prefix="grpo-submit-") as workdir:
            Path(workdir, settings.SUBMITTED_CONFIG_NAME).write_bytes(self.s.config_json)
            client.submit_job(
                entrypoint=self.s.entrypoint,
                submission_id=self.s.submission_id,
                metadata=self.s.metadata,
                runtime_env={"working_dir": workdir},
            )

    def _follow(self, client: BoundedJobClient) -> Outcome:
        follower = LogFollower(client, self.s.submission_id, self.out, self.relays)
        follower.start()
        try:
            job = self._wait_for_end(client)
        except BaseException:
            follower.finish(0)
            raise
        if job is None:
            follower.finish(0)
            return self._settle_reports(decide_exit(None, None, None))
        drain = self.t.drain
        if self._stop_deadline is not None:
            drain = min(drain, max(1.0, self._stop_deadline - time.monotonic()))
        if not follower.finish(drain):
            self._catch_up_logs(client, follower)
        return self._settle_reports(
            decide_exit(job.status.value, job.driver_exit_code, follower.announced_code))

    def _settle_reports(self, outcome: Outcome) -> Outcome:
        """``outcome``, unless the trainer's terminal report could not be written: without it
        the operator takes the exit code alone, and exit 0 without a terminal report ends a
        run Failed. A code that ends the run by itself (NON_RETRYABLE_EXIT_CODES) ends it as
        the report would have, same outcome and reason, so it stays: a retry could even end
        otherwise (the frozen inputs are checked against what each attempt found at its
        start)."""
        unwritten = [relay for relay in self.relays if not relay.settle()]
        if not unwritten:
            return outcome
        if outcome.code in NON_RETRYABLE_EXIT_CODES:
            log.warning("the trainer's terminal report could not be written; its exit code %s "
                        "tells the operator how the run ended", describe(outcome.code))
            return outcome
        return Outcome(
            ExitCode.REPORT_NOT_WRITTEN,
            f"{outcome.explanation}, but the trainer's terminal report could not be written to "
            f"the report ConfigMap (instead of exit {outcome.code})",
        )

    def _wait_for_end(self, client: BoundedJobClient):
        """Poll until the job ended (its JobDetails) or vanished (None); stop it on request."""
        sid = self.s.submission_id
        last_status = None
        last_contact = time.monotonic()
        while True:
            if self._stop_requested.is_set() and self._stop_deadline is None:
                self._request_stop(client)
            try:
                job = client.get_job_info(sid)
            except AuthenticationError as exc:
                raise auth_error(exc, self.s.address, self.s.token_file) from None
            except JobsApiError as exc:
                if exc.status != 404:
                    raise DriverError(f"the Ray head failed to report job {sid}: {exc}") from None
                log.warning("job %s vanished from the head", sid)
                return None
            except Exception as exc:
                if not is_transient(exc):
                    raise
                if time.monotonic() - last_contact > self.t.lost:
                    raise DriverError(
                        f"lost contact with the Ray head at {self.s.address} for more than "
                        f"{self.t.lost:g}s while following job {sid} ({describe_error(exc)})"
                    ) from None
                log.warning("polling job %s: %s", sid, describe_error(exc))
            else:
                last_contact = time.monotonic()
                if job.status.is_terminal():
                    log.info("job %s ended %s", sid, job.status)
                    return job
                if job.status != last_status:
                    log.info("job %s is %s", sid, job.status)
                    last_status = job.status
            if self._stop_deadline is not None and time.monotonic() > self._stop_deadline:
                raise DriverError(
                    f"job {sid} did not end within {self.t.stop:g}s of the stop request "
                    "(is the head's RAY_JOB_STOP_WAIT_TIME_S longer than the driver's "
                    "--stop-timeout?)"
                )
            self._pause(self.t.poll)

    def _request_stop(self, client: BoundedJobClient) -> None:
        sid = self.s.submission_id
        self._stop_deadline = time.monotonic() + self.t.stop
        log.info("stop requested: asking Ray to stop job %s and waiting up to %gs for it to end",
                 sid, self.t.stop)
        try:
            self._call(lambda: client.stop_job(sid), what=f"stopping job {sid}",
                       deadline=self._stop_deadline)
        except JobsApiError as exc:
            if exc.status != 404:
                raise DriverError(f"the Ray head failed to stop job {sid}: {exc}") from None

    def _catch_up_logs(self, client: BoundedJobClient, follower: LogFollower) -> None:
        try:
            follower.catch_up(client.get_job_logs(self.s.submission_id))
        except Exception as exc:
            log.warning("could not read the rest of job %s's log: %s",
                        self.s.submission_id, describe_error(exc))

    # --- requests --------------------------------------------------------------------------------

    def _lookup(self, client: BoundedJobClient, deadline: float):
        """The attempt's job, or None if the head does not know it."""
        try:
            return self._call(lambda: client.get_job_info(self.s.submission_id),
                              what=f"looking up job {self.s.submission_id}", deadline=deadline)
        except JobsApiError as exc:
            if exc.status == 404:
                return None
            raise DriverError(f"the Ray head failed to look up job "
                              f"{self.s.submission_id}: {exc}") from None

    def _call(self, call: Callable[[], T], *, what: str, deadline: float) -> T:
        """``call()``, retried on transient errors until ``deadline``; auth errors are final."""
        while True:
            try:
                return call()
            except AuthenticationError as exc:
                raise auth_error(exc, self.s.address, self.s.token_file) from None
            except Exception as exc:
                if not is_transient(exc):
                    raise
                if time.monotonic() + 1.0 > deadline:
                    raise DriverError(f"{what}: no usable answer from the Ray head at "
                                      f"{self.s.address} ({describe_error(exc)})") from None
                log.warning("%s: %s; retrying", what, describe_error(exc))
                time.sleep(1.0)


def _has_ended(client: BoundedJobClient, sid: str) -> bool:
    return client.get_job_info(sid).status.is_terminal()


def run_submission(submission: Submission, out: TextIO | None = None,
                   relays: Sequence[ReportRelay] = ()) -> int:
    """Run `Driver` for ``submission``, feeding the job's log to ``relays``; any unexpected
    error exits RETRYABLE_FAILURE."""
    try:
        return Driver(submission, out, relays).run()
    except Exception:
        log.exception("the driver failed unexpectedly")
        return int(ExitCode.RETRYABLE_FAILURE)
