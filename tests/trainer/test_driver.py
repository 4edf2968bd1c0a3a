"""The driver (`python -m grpo_trainer submit`) against a real local Ray head.

Every driver runs as a subprocess, as in its pod, except where a test hands the driver a relay
of its own (then it runs in-process); the "trainers" are tiny Python scripts submitted with
--entrypoint (`driver_harness`). Each test uses its own run name, so jobs on the shared head
never collide. The report relay's tests marked ``cluster`` write the report ConfigMap of a
real API server, with the run's own identity, through a fault-injecting proxy where they fail
writes (`apiserver_proxy`).
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import signal
import socket

import pytest
from kubernetes import client
from ray.job_submission import JobStatus

from grpo_operator.api.contract import CONTRACT_VERSION
from grpo_operator.api.exit_codes import ExitCode
from grpo_operator.api.report import (
    REPORT_KEY,
    REPORT_SIGNATURE_KEY,
    TrainerState,
    parse_report,
    sign_report,
    signature_valid,
)
from grpo_operator.api.status import TrainerLedger
from grpo_operator.children import identity
from grpo_operator.children.meta import RunRef
from grpo_operator.naming import ChildNames
from grpo_trainer.driver import settings
from grpo_trainer.driver.logs import LogFollower
from grpo_trainer.driver.outcome import (
    ExitMarkerScanner,
    announce_exit,
    decide_exit,
    exit_line,
)
from grpo_trainer.driver.relay import Backoff, ConfigMapSink, ReportRelay
from grpo_trainer.driver.submit import Submission, Timeouts, run_submission
from grpo_trainer.reporting import REPORT_MARKER, Reporter, parse_report_line
from localcluster.processes import free_port
from tests.trainer.apiserver_proxy import FaultProxy
from tests.trainer.driver_harness import Run
from tests.waiting import wait_for

# --- against the real head ------------------------------------------------------------------------


def test_submit_streams_the_log_and_exits_with_the_trainers_code(ray_head, tmp_path):
    # (Exit 0 and SUCCEEDED: the later-attempt test below.)
    code = ExitCode.BUDGET_EXHAUSTED
    run = Run(ray_head, tmp_path, attempt=2)
    entrypoint = run.trainer(f"""
        import json, sys
        print("hello from the trainer")
        config = json.load(open("{settings.SUBMITTED_CONFIG_NAME}"))
        print("config of attempt", config["attempt"], "of run", config["run"]["uid"])
        sys.exit({int(code)})
    """)

    result = run.submit(entrypoint)

    assert result.returncode == code, result.stderr
    assert "hello from the trainer" in result.stdout
    # The run config travelled with the submission.
    assert f"config of attempt 2 of run {run.uid}" in result.stdout
    job = run.job(attempt=2)
    assert job.status == JobStatus.FAILED
    assert job.driver_exit_code == code
    assert job.metadata == {"grpo.dev/run": run.name, "grpo.dev/run-uid": run.uid,
                            "grpo.dev/attempt": "2"}
    assert ray_head.token not in result.stdout + result.stderr


def test_a_second_driver_attaches_and_a_late_one_reports_without_resubmitting(
    ray_head, tmp_path
):
    run = Run(ray_head, tmp_path)
    starts, release = tmp_path / "starts", tmp_path / "release"
    entrypoint = run.trainer(f"""
        import os, sys, time
        with open({str(starts)!r}, "a") as f:
            f.write("started\\n")
        print("trainer waiting", flush=True)
        deadline = time.monotonic() + 90
        while not os.path.exists({str(release)!r}) and time.monotonic() < deadline:
            time.sleep(0.2)
        print("trainer released")
        sys.exit({int(ExitCode.FROZEN_INPUT_CHANGED)})
    """)

    first = run.start(entrypoint, "first")
    wait_for(lambda: starts.exists() and run.job().status == JobStatus.RUNNING,
             timeout=60, what="the job to run")
    second = run.start(entrypoint, "second")
    wait_for(lambda: "attaching" in second.stderr or second.popen.poll() is not None,
             timeout=60, what="the second driver to attach")
    release.touch()

    assert first.wait() == ExitCode.FROZEN_INPUT_CHANGED, first.stderr
    assert second.wait() == ExitCode.FROZEN_INPUT_CHANGED, second.stderr
    for driver in (first, second):
        assert "trainer waiting" in driver.stdout
        assert driver.stdout.count("trainer released") == 1
    late = run.submit(entrypoint)
    assert late.returncode == ExitCode.FROZEN_INPUT_CHANGED, late.stderr
    assert "trainer released" in late.stdout
    assert [job.submission_id for job in run.jobs()] == [f"{run.name}-a1"]
    assert starts.read_text() == "started\n"


def test_sigterm_stops_the_job_which_checkpoints_and_the_driver_exits_suspended(
    ray_head, tmp_path
):
    run = Run(ray_head, tmp_path)
    started, checkpoint = tmp_path / "started", tmp_path / "checkpoint"
    # The "checkpoint" takes longer than Ray's default stop wait (3 s): it completes only
    # because the head sets RAY_JOB_STOP_WAIT_TIME_S.
    entrypoint = run.trainer(f"""
        import signal, sys, time
        from grpo_trainer.driver.outcome import announce_exit

        def on_sigterm(signum, frame):
            print("trainer: SIGTERM, checkpointing", flush=True)
            time.sleep(4)
            open({str(checkpoint)!r}, "w").write("step 7")
            announce_exit({int(ExitCode.SUSPENDED)})
            sys.exit({int(ExitCode.SUSPENDED)})

        signal.signal(signal.SIGTERM, on_sigterm)
        open({str(started)!r}, "w").close()
        print("trainer: training", flush=True)
        time.sleep(90)
        sys.exit(1)
    """)

    driver = run.start(entrypoint, "driver")
    wait_for(started.exists, timeout=60, what="the trainer to start")
    driver.popen.send_signal(signal.SIGTERM)

    assert driver.wait() == ExitCode.SUSPENDED, driver.stderr
    assert checkpoint.read_text() == "step 7"
    assert "trainer: SIGTERM, checkpointing" in driver.stdout
    job = run.job()
    # Ray stopped it: the code came from the trainer's announcement, not from Ray.
    assert job.status == JobStatus.STOPPED
    assert job.driver_exit_code is None


def test_a_later_attempt_stops_the_earlier_one_whose_driver_exits_retryable(ray_head, tmp_path):
    run = Run(ray_head, tmp_path)
    started = tmp_path / "started"
    # No SIGTERM handler: stopped, it dies without announcing a code.
    stuck = run.trainer(f"""
        import time
        open({str(started)!r}, "w").close()
        time.sleep(90)
    """)
    earlier = run.start(stuck, "earlier")
    wait_for(started.exists, timeout=60, what="attempt 1 to start")

    later = run.submit(run.trainer("print('attempt two')"), config=run.config_for(2))

    assert later.returncode == ExitCode.SUCCESS, later.stderr
    assert "attempt two" in later.stdout
    assert run.job(attempt=2).status == JobStatus.SUCCEEDED
    assert "stopping jobs of earlier attempts" in later.stderr
    assert run.job(attempt=1).status == JobStatus.STOPPED
    assert earlier.wait() == ExitCode.RETRYABLE_FAILURE, earlier.stderr
    assert "without an exit code" in earlier.stderr
    # A driver of attempt 1 started now (a stale Job) submits nothing.
    stale = run.submit(stuck, config=run.config_for(1))
    assert stale.returncode == ExitCode.RETRYABLE_FAILURE
    assert "is stale and submits nothing" in stale.stderr
    assert sorted(job.submission_id for job in run.jobs()) == [f"{run.name}-a1", f"{run.name}-a2"]


def _silent_listener() -> socket.socket:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    return s


@pytest.mark.parametrize("head", ["refusing", "silent"])
def test_an_unreachable_head_fails_within_the_connect_timeout(ray_head, tmp_path, head):
    run = Run(ray_head, tmp_path)
    listener = _silent_listener() if head == "silent" else None
    port = listener.getsockname()[1] if listener else free_port()
    try:
        result = run.submit(
            "true", "--connect-timeout", "3", "--request-timeout", "2",
            env=run.env(RAY_ADDRESS=f"http://127.0.0.1:{port}"),
        )
    finally:
        if listener:
            listener.close()
    assert result.returncode == ExitCode.RETRYABLE_FAILURE
    assert f"cannot reach the Ray head's Jobs API at http://127.0.0.1:{port} within 3s" in (
        result.stderr
    )
    assert ("no answer in time" if head == "silent" else "connection failed") in result.stderr


def test_a_wrong_token_is_an_authentication_error(ray_head, tmp_path):
    run = Run(ray_head, tmp_path)
    wrong = tmp_path / "wrong-token"
    wrong.write_text("0" * 64 + "\n")

    result = run.submit("true", env=run.env(RAY_AUTH_TOKEN_PATH=str(wrong)))

    assert result.returncode == ExitCode.RETRYABLE_FAILURE
    assert f"rejected the auth token read from {wrong} (HTTP 403, wrong token)" in result.stderr
    assert "0" * 64 not in result.stdout + result.stderr
    assert run.jobs() == []


def test_no_token_is_an_authentication_error(ray_head, tmp_path):
    run = Run(ray_head, tmp_path)
    env = run.env()
    del env["RAY_AUTH_TOKEN_PATH"]

    result = run.submit("true", env=env)

    assert result.returncode == ExitCode.RETRYABLE_FAILURE
    assert "requires an auth token and none was sent" in result.stderr


def test_an_invalid_run_config_is_invalid_input(ray_head, tmp_path):
    run = Run(ray_head, tmp_path)
    bad = tmp_path / "bad.json"
    doc = json.loads(run.config.read_text())
    doc["attempt"] = "one"
    bad.write_text(json.dumps(doc))

    result = run.submit("true", config=bad)

    assert result.returncode == ExitCode.INVALID_INPUT
    assert "invalid run config" in result.stderr and "attempt" in result.stderr
    assert run.jobs() == []


def test_a_run_config_this_image_cannot_run_is_refused_before_submitting(ray_head, tmp_path):
    run = Run(ray_head, tmp_path)
    newer = tmp_path / "newer.json"
    doc = json.loads(run.config.read_text())
    doc["contractVersion"] = f"{CONTRACT_VERSION.major}.{CONTRACT_VERSION.minor + 1}"
    doc["spec"]["learner"] = {"fp8": True}  # what a newer operator might write
    newer.write_text(json.dumps(doc))

    result = run.submit("true", config=newer)

    assert result.returncode == ExitCode.INCOMPATIBLE_CONTRACT
    assert "incompatible run config" in result.stderr and "spec.learner.fp8" in result.stderr
    assert run.jobs() == []


# --- without a head -------------------------------------------------------------------------------


def test_the_exit_line_is_found_across_chunks_and_the_last_one_wins():
    out = io.StringIO()
    out.write("step 3 done")  # no newline: the announcement must still stand alone
    announce_exit(ExitCode.BUDGET_EXHAUSTED, out)
    out.write("noise\n")
    announce_exit(ExitCode.SUSPENDED, out)
    text = "Running entrypoint for job x: python -c 'print(\"GRPO_TRAINER_EXIT_CODE=0\")'\n" + (
        out.getvalue()
    )
    scanner = ExitMarkerScanner()
    for i in range(0, len(text), 7):
        scanner.feed(text[i : i + 7])
    scanner.close()
    assert scanner.code == ExitCode.SUSPENDED
    with pytest.raises(ValueError):
        exit_line(256)


@pytest.mark.parametrize(
    ("status", "ray_code", "announced", "expected"),
    [
        ("SUCCEEDED", 0, None, 0),
        ("FAILED", 10, None, 10),
        ("FAILED", 10, 13, 10),  # Ray's record of the process wins
        ("FAILED", -9, None, 137),  # killed by SIGKILL, passed on as a shell would
        ("STOPPED", None, 13, 13),
        ("STOPPED", None, None, ExitCode.RETRYABLE_FAILURE),
        ("FAILED", None, None, ExitCode.RETRYABLE_FAILURE),  # e.g. the entrypoint never started
        (None, None, None, ExitCode.RETRYABLE_FAILURE),  # the job vanished
    ],
)
def test_exit_code_decision(status, ray_code, announced, expected):
    assert decide_exit(status, ray_code, announced).code == expected


def test_stop_settings_nest():
    wait = 120  # the default of resources.terminationGracePeriodSeconds
    assert settings.job_stop_wait_env(wait) == {"RAY_JOB_STOP_WAIT_TIME_S": str(wait)}
    driver_stop = settings.default_stop_timeout_s(settings.job_stop_wait_env(wait))
    assert wait < driver_stop < settings.driver_termination_grace_s(wait)
    assert settings.job_stop_wait_env(0) == {"RAY_JOB_STOP_WAIT_TIME_S": "3"}


class _FlakyStream:
    """A stand-in for the Jobs API's log websocket: breaks once, then (like Ray's) restarts
    from the beginning of the log."""

    def __init__(self, chunks: list[str]):
        self.chunks = chunks
        self.opened = 0

    async def tail_job_logs(self, _job_id):
        self.opened += 1
        for i, chunk in enumerate(self.chunks):
            if self.opened == 1 and i == 2:
                raise RuntimeError("WebSocket connection closed unexpectedly")
            yield chunk
            await asyncio.sleep(0)


def test_the_log_reaches_stdout_exactly_once_across_a_broken_stream():
    chunks = ["line 1\n", "line 2\n", "line 3\n", "\n" + exit_line(13) + "\n", "line 5\n"]
    stream, out = _FlakyStream(chunks), io.StringIO()
    follower = LogFollower(stream, "job", out)
    follower.start()
    assert follower.finish(timeout=30)
    assert out.getvalue() == "".join(chunks)
    assert stream.opened == 2
    assert follower.announced_code == 13


# --- the report relay -----------------------------------------------------------------------------

# A trainer whose log holds report lines that cannot be reports between its genuine ones
# (published with the real Reporter): Starting, Running, then Finished — Succeeded (exit 0)
# or, with IS_FAILURE, Failed because an input changed (exit 11).
REPORTING_TRAINER = """
    import datetime, sys
    from grpo_operator.api.constants import Outcome, Reason
    from grpo_operator.api.exit_codes import ExitCode
    from grpo_operator.api.report import TrainerState
    from grpo_operator.api.status import ArtifactRef, TrainerLedger, TrainerTerminal
    from grpo_trainer.driver.outcome import announce_exit
    from grpo_trainer.reporting import REPORT_MARKER, Reporter

    reporter = Reporter(attempt=ATTEMPT)
    reporter.publish(TrainerState.STARTING, TrainerLedger(planned_steps=1))
    for bad in ('{"attempt": Infinity, "sequence": 9}', '{"attempt": ATTEMPT, "sequence": NaN}',
                '{"attempt": ATTEMPT, "sequence": 1e999}', "[" * 5000, "garbage"):
        print(REPORT_MARKER + bad, flush=True)
    ledger = TrainerLedger(planned_steps=1, completed_steps=1)
    reporter.publish(TrainerState.RUNNING, ledger)
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    if IS_FAILURE:
        terminal = TrainerTerminal(outcome=Outcome.FAILED, reason=Reason.FROZEN_INPUT_CHANGED,
                                   message="the dataset changed", finished_time=now)
        code = ExitCode.FROZEN_INPUT_CHANGED
    else:
        terminal = TrainerTerminal(
            outcome=Outcome.SUCCEEDED, reason=Reason.COMPLETED, finished_time=now,
            artifact=ArtifactRef(path="/checkpoints/run/artifact", step=1, sha256="a" * 64))
        code = ExitCode.SUCCESS
    reporter.publish(TrainerState.FINISHED, ledger, terminal=terminal)
    announce_exit(code)
    sys.exit(code)
"""


def _reporting_trainer(run: Run, attempt: int = 1, failed: bool = False) -> str:
    return run.trainer(REPORTING_TRAINER.replace("ATTEMPT", str(attempt))
                       .replace("IS_FAILURE", str(failed)))


def _submission(run: Run, entrypoint: str, attempt: int = 1) -> Submission:
    return Submission(
        address=run.head.address, token_file=run.head.token_file, run_name=run.name,
        run_uid=run.uid, attempt=attempt, config_json=run.config_for(attempt).read_bytes(),
        entrypoint=entrypoint, timeouts=Timeouts(poll=0.5),
    )


class _FlakySink:
    """A sink that fails its first ``failures`` writes of the terminal report (None: all)."""

    def __init__(self, failures: int | None):
        self.failures = failures
        self.terminal_calls = 0
        self.written: list[str] = []

    def __call__(self, text: str) -> None:
        found = parse_report_line(REPORT_MARKER + text)
        if found.finished:
            self.terminal_calls += 1
            if self.failures is None or self.terminal_calls <= self.failures:
                raise ConnectionResetError("connection reset by peer")
        self.written.append(text)


@pytest.mark.parametrize(("failures", "failed", "code"), [
    (2, False, ExitCode.SUCCESS),
    (None, False, ExitCode.REPORT_NOT_WRITTEN),
    # A code that ends the run by itself ends it as the report would have: it stays.
    (None, True, ExitCode.FROZEN_INPUT_CHANGED),
], ids=["written-on-retry", "never-written", "never-written-after-a-failure"])
def test_a_failed_terminal_write_is_retried_and_a_lost_one_is_its_own_exit(
    ray_head, tmp_path, caplog, failures, failed, code
):
    # A failing sink object stands in for the API server here; the cluster test below fails
    # the real ConfigMap writes.
    run = Run(ray_head, tmp_path)
    sink = _FlakySink(failures)
    relay = ReportRelay(sink, attempt=1, terminal_retry=Backoff(timeout=3, first=0.2))

    with caplog.at_level(logging.INFO, logger="grpo_trainer.driver"):
        exit_code = run_submission(
            _submission(run, _reporting_trainer(run, failed=failed)), io.StringIO(), [relay])

    assert exit_code == code
    # (Reports printed close together reach the relay in one chunk: only the newest is written.)
    states = [json.loads(text)["state"] for text in sink.written]
    if failures is None:
        assert states and "Finished" not in states
        assert sink.terminal_calls >= 4  # the first write, then the retries for 3 s
        assert "gave up writing the terminal report" in caplog.text
        if code == ExitCode.REPORT_NOT_WRITTEN:
            assert ("terminal report could not be written to the report ConfigMap (instead of "
                    "exit 0): exit 17") in caplog.text
    else:
        assert states[-1] == "Finished"
        assert sink.terminal_calls == failures + 1


def test_a_driver_in_a_pod_without_its_report_key_submits_nothing(ray_head, tmp_path):
    run = Run(ray_head, tmp_path)
    empty = tmp_path / "report_key"
    empty.write_bytes(b"")
    # The API server is never asked: the key is read first.
    pod = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(free_port())}
    unset = run.env(**pod)
    unset.pop(settings.REPORT_KEY_PATH_ENV, None)
    for env, message in [(unset, "$GRPO_REPORT_KEY_PATH is not set"),
                         (run.env(**pod, GRPO_REPORT_KEY_PATH=str(empty)),
                          f"the report key file {empty} ($GRPO_REPORT_KEY_PATH) is empty")]:
        result = run.submit("true", env=env)
        assert result.returncode == ExitCode.RETRYABLE_FAILURE, result.stderr
        assert message in result.stderr
    assert run.jobs() == []


# --- the report ConfigMap on a real API server --------------------------------------------------


def _report_client(cluster, admin, namespace: str, run: Run, data: dict[str, str],
                   host: str | None = None) -> client.ApiClient:
    """The run's identity as the operator makes it (a ServiceAccount whose Role may only get
    and patch the report ConfigMap), its ConfigMap holding ``data``, and a client with that
    identity talking to ``host`` (default: the API server itself)."""
    core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    ref = RunRef(run.name, namespace, run.uid)
    names = ChildNames(run.name)
    for body, create in [(identity.service_account(ref), core.create_namespaced_service_account),
                         (identity.role(ref), rbac.create_namespaced_role),
                         (identity.role_binding(ref), rbac.create_namespaced_role_binding)]:
        body["metadata"].pop("ownerReferences")  # no GRPORun here: the GC would delete them
        create(namespace, body)
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=names.report_config_map), data=data))
    token = core.create_namespaced_service_account_token(
        names.service_account, namespace,
        client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
            audiences=[], expiration_seconds=600)),
    ).status.token
    conf = client.Configuration()
    conf.host = host or cluster.server
    conf.ssl_ca_cert = str(cluster.pki.ca.cert)
    conf.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(conf)


def _stored(admin, namespace: str, run: Run) -> dict[str, str]:
    cm = client.CoreV1Api(admin).read_namespaced_config_map(
        ChildNames(run.name).report_config_map, namespace)
    return cm.data or {}


REPORT_KEY_BYTES = b"the run's report key\n"


def _seeded(attempt: int, sequence: int, key: bytes | None) -> dict[str, str]:
    text = json.dumps({"schemaVersion": 1, "attempt": attempt, "sequence": sequence,
                       "time": "2025-01-02T00:00:00Z", "state": "Running"})
    return {REPORT_KEY: text, REPORT_SIGNATURE_KEY: sign_report(key, text) if key else "00"}


@pytest.mark.cluster
@pytest.mark.parametrize(("stored", "honoured"), [
    (_seeded(999999, 0, None), False),  # beyond the contract's attempts, unsigned
    (_seeded(7, 0, REPORT_KEY_BYTES), False),  # signed, but a later attempt than the driver's
    (_seeded(2, 50, b"another key"), False),  # this attempt, badly signed
    (_seeded(1, 0, REPORT_KEY_BYTES), False),  # signed, an earlier attempt
    (_seeded(2, 50, REPORT_KEY_BYTES), True),  # a restarted driver of this attempt
], ids=["huge-attempt", "later-attempt", "bad-signature", "earlier-attempt", "own-attempt"])
def test_only_a_signed_report_of_its_own_attempt_sets_where_the_relay_starts(
    cluster, k8s_api, namespace, tmp_path, stored, honoured
):
    run = Run(None, tmp_path, attempt=2)
    api = _report_client(cluster, k8s_api, namespace, run, stored)
    sink = ConfigMapSink(namespace, ChildNames(run.name).report_config_map, REPORT_KEY,
                         REPORT_KEY_BYTES, core=client.CoreV1Api(api))
    relay = ReportRelay(sink, sink.stored_cursor(2), attempt=2)
    log = io.StringIO()
    reporter = Reporter(attempt=2, stream=log)
    for step in range(3):
        reporter.publish(TrainerState.RUNNING, TrainerLedger(planned_steps=3,
                                                             completed_steps=step))

    relay.feed(log.getvalue())

    data = _stored(k8s_api, namespace, run)
    if honoured:  # sequence 2 is older than the stored 50: nothing written
        assert data == stored
        return
    report = parse_report(data[REPORT_KEY])
    assert (report.attempt, report.sequence, report.ledger.completed_steps) == (2, 2, 2)
    assert signature_valid(REPORT_KEY_BYTES, data[REPORT_KEY], data[REPORT_SIGNATURE_KEY])


@pytest.mark.cluster
@pytest.mark.parametrize(("faults", "code"), [
    (["500", "reset"], ExitCode.SUCCESS),
    (None, ExitCode.REPORT_NOT_WRITTEN),
], ids=["fails-twice", "always-fails"])
def test_the_terminal_report_reaches_the_configmap_through_api_server_faults(
    cluster, k8s_api, namespace, ray_head, tmp_path, caplog, faults, code
):
    run = Run(ray_head, tmp_path)
    proxy = FaultProxy(cluster.server, cluster.pki.ca.cert)
    try:
        def terminal_patch(method: str, body: bytes) -> bool:
            return method == "PATCH" and b'\\"state\\":\\"Finished\\"' in body

        proxy.fail(terminal_patch, faults)
        api = _report_client(cluster, k8s_api, namespace, run, {}, host=proxy.url)
        sink = ConfigMapSink(namespace, ChildNames(run.name).report_config_map, REPORT_KEY,
                             REPORT_KEY_BYTES, core=client.CoreV1Api(api))
        relay = ReportRelay(sink, sink.stored_cursor(1), attempt=1,
                            terminal_retry=Backoff(timeout=4, first=0.5))

        with caplog.at_level(logging.INFO, logger="grpo_trainer.driver"):
            exit_code = run_submission(_submission(run, _reporting_trainer(run)),
                                       io.StringIO(), [relay])
    finally:
        proxy.close()

    assert exit_code == code
    answers = [seen.answer for seen in proxy.seen
               if seen.method == "PATCH" and terminal_patch(seen.method, seen.body)]
    data = _stored(k8s_api, namespace, run)
    report = parse_report(data[REPORT_KEY])
    assert signature_valid(REPORT_KEY_BYTES, data[REPORT_KEY], data[REPORT_SIGNATURE_KEY])
    if faults is None:
        assert report.state in (TrainerState.STARTING, TrainerState.RUNNING)
        assert len(answers) >= 3 and set(answers) == {"500"}
    else:
        assert report.state == TrainerState.FINISHED
        assert report.terminal.outcome == "Succeeded"
        assert answers == ["500", "reset", "200"]
        # Each fault reached the relay (no client retried the reset on its own).
        assert caplog.text.count("could not relay report") == 2
