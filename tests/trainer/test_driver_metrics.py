"""The driver's /metrics: the figures of the newest report the trainer printed, relayed from the
job's log and scraped over HTTP, against the real local Ray head (`driver_harness`)."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from grpo_operator.api.exit_codes import ExitCode
from grpo_trainer.driver import settings
from localcluster.processes import free_port
from localcluster.prometheus import check_metrics, ensure_built
from tests.trainer.driver_harness import Run
from tests.waiting import wait_for

# The trainer's reports, published with the real Reporter: Starting, Running after step 1
# (training at 4 s a step, 4 steps left), then (released by the test) Suspended with a
# checkpoint and rollout counts.
TRAINER = """
    import datetime, os, sys, time
    from grpo_operator.api.constants import TrainerActivity
    from grpo_operator.api.report import PhaseSeconds, StepFigures, TrainerState
    from grpo_operator.api.status import (
        CheckpointRef, EvalFigures, RolloutReuse, TrainerLedger, TrainerProgress,
        TrainerRecovery)
    from grpo_trainer.reporting import Reporter

    def wait_for(path):
        deadline = time.monotonic() + 90
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.1)

    reporter = Reporter(attempt=2)
    ledger = TrainerLedger(planned_steps=5)
    reporter.publish(TrainerState.STARTING, ledger)
    evals = [EvalFigures(step=1, prompts=8, samples=1, reward_mean=0.375, pass_at_1=0.375,
                         response_length_mean=10.5, seconds=1.5)]
    ledger = TrainerLedger(planned_steps=5, completed_steps=1, prompt_tokens=448,
                           generated_tokens=256, reward_mean=0.25, reward_std=0.5,
                           tokens_per_second=128.0, eval_prompt_tokens=96,
                           eval_generated_tokens=84, evals=evals)
    progress = TrainerProgress(activity=TrainerActivity.TRAINING, step_seconds=4.0,
                               remaining_seconds=16.0, since=datetime.datetime.now(datetime.UTC))
    figures = StepFigures(
        step=1, clip_fraction_high=0.125, clip_fraction_low=0.0625, dual_clip_fraction=0.0,
        entropy=2.5, approx_kl=0.001, policy_loss=-0.03, grad_norm=0.75, learning_rate=1e-5,
        logprob_mismatch=0.002, response_length_mean=12.5, response_length_max=32,
        truncated_fraction=0.25, skipped_updates=0,
        seconds=PhaseSeconds(generate=2.0, reward=0.25, ref_logprobs=0.5, update=1.0,
                             sync=0.125, step=4.0))
    reporter.publish(TrainerState.RUNNING, ledger, progress=progress, last_step=figures)
    open({running!r}, "w").close()
    wait_for({release!r})
    checkpoint = CheckpointRef(step=1, path="/checkpoints/uid/step_1", sha256="a" * 64,
                               time=datetime.datetime(2025, 1, 2, tzinfo=datetime.UTC))
    recovery = TrainerRecovery(last_checkpoint=checkpoint, rollout=RolloutReuse(
        sealed_groups=6, reused_groups=2, abandoned_attempts=3))
    reporter.publish(TrainerState.SUSPENDED, ledger, recovery)
    open({suspended!r}, "w").close()
    wait_for({end!r})
    sys.exit({code})
"""


def exposition(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        return reply.read().decode()


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    """Every sample of the driver's /metrics, by name and labels."""
    text = exposition(port)
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def figures(samples: dict, run: Run) -> dict[str, float]:
    """The run's grpo_trainer_* series by name without the prefix; ``state`` and ``activity``
    as the value whose gauge is 1, the other labelled families as ``name[label]``."""
    labels = {("namespace", "ns"), ("name", run.name)}
    out = {}
    for (name, sample_labels), value in samples.items():
        if not name.startswith("grpo_trainer_"):
            continue
        assert labels <= sample_labels, (name, sample_labels)
        name = name.removeprefix("grpo_trainer_")
        extra = dict(sample_labels - labels)
        if name in ("state", "activity"):
            if value == 1:
                out[name] = extra[name]
        elif extra:
            (part,) = extra.values()
            out[f"{name}[{part}]"] = value
        else:
            out[name] = value
    return out


def test_metrics_show_the_newest_relayed_report(ray_head, tmp_path):
    run = Run(ray_head, tmp_path, attempt=2)
    running, release = tmp_path / "running", tmp_path / "release"
    suspended, end = tmp_path / "suspended", tmp_path / "end"
    entrypoint = run.trainer(TRAINER.format(
        running=str(running), release=str(release), suspended=str(suspended), end=str(end),
        code=int(ExitCode.SUSPENDED)))
    port = free_port()
    driver = run.start(entrypoint, "driver", "--metrics-port", str(port))
    try:
        wait_for(running.exists, timeout=60, what="the trainer's Running report")
        seen = wait_for(
            lambda: (f := figures(scrape(port), run)).get("report_sequence") == 1 and f,
            timeout=30, what="the Running report on /metrics")
        assert seen.pop("last_report_timestamp_seconds") > 0
        # No kl (klCoef 0), no checkpoint yet, no old-logprob pass: no series rather than a
        # made-up value.
        assert seen == {
            "state": "Running", "activity": "Training", "attempt": 2, "report_sequence": 1,
            "step_seconds": 4.0, "remaining_seconds": 16.0,
            "planned_steps": 5, "completed_steps": 1,
            "prompt_tokens_total": 448, "generated_tokens_total": 256,
            "reward_mean": 0.25, "reward_std": 0.5, "tokens_per_second": 128.0,
            "rollout_sealed_groups": 0, "rollout_reused_groups": 0,
            "rollout_abandoned_attempts": 0, "rollout_batch_shortfall": 0,
            "entropy_nats": 2.5, "approx_kl": 0.001, "policy_loss": -0.03, "grad_norm": 0.75,
            "learning_rate": 1e-5, "logprob_mismatch": 0.002,
            "response_length_mean_tokens": 12.5, "response_length_max_tokens": 32,
            "truncated_responses_ratio": 0.25, "skipped_updates": 0,
            "clipped_tokens_ratio[high]": 0.125, "clipped_tokens_ratio[low]": 0.0625,
            "clipped_tokens_ratio[dual]": 0.0,
            "reward_failures[error]": 0.0, "reward_failures[timeout]": 0.0,
            "reward_failures[invalid]": 0.0,
            "phase_seconds[generate]": 2.0, "phase_seconds[reward]": 0.25,
            "phase_seconds[ref_logprobs]": 0.5, "phase_seconds[update]": 1.0,
            "phase_seconds[sync]": 0.125, "phase_seconds[step]": 4.0,
            # the newest evaluation; no pass@k series with one sample
            "eval_prompt_tokens_total": 96, "eval_generated_tokens_total": 84,
            "eval_step": 1, "eval_prompts": 8, "eval_reward_mean": 0.375,
            "eval_pass_at_1_ratio": 0.375, "eval_response_length_mean_tokens": 10.5,
            "eval_seconds": 1.5,
        }
        # Every name, type and help text as Prometheus's own lint wants them.
        assert check_metrics(ensure_built() / "promtool", exposition(port)) == []

        release.touch()
        wait_for(suspended.exists, timeout=30, what="the trainer's Suspended report")
        seen = wait_for(
            lambda: (f := figures(scrape(port), run)).get("report_sequence") == 2 and f,
            timeout=30, what="the Suspended report on /metrics")
        assert seen["state"] == "Suspended"
        assert "activity" not in seen  # that report says nothing of it: no series
        assert seen["last_checkpoint_step"] == 1
        assert (seen["rollout_sealed_groups"], seen["rollout_reused_groups"],
                seen["rollout_abandoned_attempts"]) == (6, 2, 3)
    finally:
        end.touch()  # the trainer ends, whatever failed above
    assert driver.wait() == ExitCode.SUSPENDED, driver.stderr
    assert f"serving the trainer's report figures at 0.0.0.0:{port}/metrics" in driver.stderr


def test_a_port_that_cannot_be_bound_costs_the_metrics_not_the_run(ray_head, tmp_path):
    run = Run(ray_head, tmp_path)
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        entrypoint = run.trainer(f"""
            import sys
            print("trainer trained")
            sys.exit({int(ExitCode.BUDGET_EXHAUSTED)})
        """)
        result = run.submit(entrypoint, "--metrics-port", str(port))
    assert result.returncode == ExitCode.BUDGET_EXHAUSTED, result.stderr
    assert "trainer trained" in result.stdout
    assert f"not serving metrics: cannot listen on 0.0.0.0:{port}" in result.stderr


def test_the_metrics_port_defaults_to_the_containers_and_0_turns_it_off():
    assert settings.default_metrics_port({}) == settings.DRIVER_METRICS_PORT
    assert settings.default_metrics_port({settings.METRICS_PORT_ENV: "0"}) == 0
    assert settings.default_metrics_port({settings.METRICS_PORT_ENV: "9500"}) == 9500
    with pytest.raises(ValueError):
        settings.default_metrics_port({settings.METRICS_PORT_ENV: "70000"})
