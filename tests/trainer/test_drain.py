"""The Ray pods' preStop hook (`python -m grpo_trainer drain`) against a real Ray head: it stops
the active job, whose trainer checkpoints on SIGTERM, and returns only once the job ended."""

from __future__ import annotations

import subprocess
import sys
import time

from ray.job_submission import JobStatus

from grpo_operator.api.exit_codes import ExitCode
from grpo_trainer.driver.drain import SLACK_S
from tests.trainer.driver_harness import Run, jobs_client
from tests.waiting import wait_for


def drain(address: str, token: str, stop_wait_s: int = 30) -> subprocess.CompletedProcess:
    # As KubeRay sets them in a Ray container: RAY_ADDRESS is the GCS (unreachable here), which
    # the hook must not wait for.
    env = {"PATH": "/usr/bin:/bin", "RAY_AUTH_TOKEN": token, "RAY_AUTH_MODE": "token",
           "RAY_ADDRESS": "127.0.0.1:1", "RAY_JOB_STOP_WAIT_TIME_S": str(stop_wait_s)}
    return subprocess.run([sys.executable, "-m", "grpo_trainer", "drain", "--address", address],
                          env=env, capture_output=True, text=True,
                          timeout=stop_wait_s + SLACK_S + 30)


def test_drain_stops_the_job_and_returns_once_its_checkpoint_is_written(ray_head, tmp_path):
    run = Run(ray_head, tmp_path)
    started, checkpoint = tmp_path / "started", tmp_path / "checkpoint"
    entrypoint = run.trainer(f"""
        import signal, sys, time

        def on_sigterm(signum, frame):
            time.sleep(3)  # the checkpoint takes a while
            open({str(checkpoint)!r}, "w").write("step 4")
            sys.exit({int(ExitCode.SUSPENDED)})

        signal.signal(signal.SIGTERM, on_sigterm)
        open({str(started)!r}, "w").close()
        time.sleep(90)
        sys.exit(1)
    """)
    client = jobs_client(ray_head)
    submission = client.submit_job(entrypoint=entrypoint, submission_id=f"{run.name}-a1")
    done = client.submit_job(entrypoint="true", submission_id=f"{run.name}-done")
    wait_for(lambda: client.get_job_status(done).is_terminal(), 60, what="the short job done")
    wait_for(started.exists, 60, what="the trainer started")

    began = time.monotonic()
    hook = drain(ray_head.address, ray_head.token)
    assert hook.returncode == 0, hook.stderr
    assert 3 <= time.monotonic() - began < 20  # it waited for the checkpoint, not for a GCS
    assert checkpoint.read_text() == "step 4"
    assert client.get_job_status(submission) == JobStatus.STOPPED
    assert client.get_job_status(done) == JobStatus.SUCCEEDED  # an ended job is left alone
    assert f"stopping job {submission}" in hook.stderr
    assert f"{run.name}-done" not in hook.stderr

    again = drain(ray_head.address, ray_head.token)  # nothing active: back at once
    assert again.returncode == 0 and "no job active" in again.stderr, again.stderr


def test_drain_without_a_head_exits_at_once(ray_head):
    began = time.monotonic()
    hook = drain("http://127.0.0.1:1", ray_head.token)
    assert hook.returncode == 0
    assert "does not answer" in hook.stderr, hook.stderr
    assert time.monotonic() - began < 15
