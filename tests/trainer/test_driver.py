"""The driver (`python -m grpo_trainer submit`) against a real local Ray head.

Every driver runs as a subprocess, as in its pod; the "trainers" are tiny Python scripts
submitted with --entrypoint (`driver_harness`). Each test uses its own run name, so jobs on the
shared head never collide.
"""

from __future__ import annotations

import asyncio
import io
import json
import signal
import socket

import pytest
from ray.job_submission import JobStatus

from grpo_operator.api.exit_codes import ExitCode
from grpo_trainer.driver import settings
from grpo_trainer.driver.logs import LogFollower
from grpo_trainer.driver.outcome import (
    ExitMarkerScanner,
    announce_exit,
    decide_exit,
    exit_line,
)
from localcluster.processes import free_port
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
