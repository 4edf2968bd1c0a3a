"""``python -m grpo_trainer run --config FILE`` trains locally, reports as it goes and writes a
loadable, sealed model."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from grpo_operator.api.checkpoint_layout import DIGEST_MANIFEST_FILE
from grpo_operator.api.constants import TrainerActivity
from grpo_operator.api.digest import DigestManifest
from grpo_operator.api.report import TrainerState, parse_report
from grpo_operator.api.run_config import ResumeMode, RunConfig, RunIdentity, RunPaths
from grpo_operator.api.spec import GRPORunSpec
from grpo_trainer import toy
from grpo_trainer.driver.outcome import exit_line
from grpo_trainer.reporting import parse_report_line


def test_run_writes_a_loadable_model(tiny_dirs, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = GRPORunSpec.model_validate(
        toy.tiny_spec(tiny_dirs["model"], tiny_dirs["data"], tmp_path, maxSteps=2)
    )
    run_dir = tmp_path / "uid-1"
    config = RunConfig(
        run=RunIdentity(name="tiny", namespace="default", uid="uid-1"),
        attempt=1,
        resume=ResumeMode.NONE,
        paths=RunPaths(
            model_dir=str(tiny_dirs["model"]),
            data_dir=str(tiny_dirs["data"]),
            train_file=str(tiny_dirs["data"] / "train.parquet"),
            checkpoint_dir=str(run_dir),
        ),
        report_config_map="tiny-report",
        spec=spec,
    )
    config_file = tmp_path / "run-config.json"
    config_file.write_text(config.to_json())
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a local Ray of its own

    done = subprocess.run(
        [sys.executable, "-m", "grpo_trainer", "run", "--config", str(config_file)],
        env=env, capture_output=True, text=True, timeout=420,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "step 1 reward" in done.stdout and "step 2 reward" in done.stdout

    artifact = run_dir / "artifact"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in artifact.iterdir()
    }
    trained = AutoModelForCausalLM.from_pretrained(artifact)
    initial = AutoModelForCausalLM.from_pretrained(tiny_dirs["model"])
    assert AutoTokenizer.from_pretrained(artifact).chat_template == toy.CHAT_TEMPLATE
    deltas = [
        (a - b).abs().max() for a, b in zip(trained.parameters(), initial.parameters(), strict=True)
    ]
    assert max(deltas) > 0  # two optimizer steps happened
    assert all(torch.isfinite(p).all() for p in trained.parameters())

    # The run accounted for itself: numbered reports, the last one terminal with the digest of
    # the sealed artifact, and the exit code announced for the driver.
    reports = [parse_report(found[0]) for line in done.stdout.splitlines()
               if (found := parse_report_line(line))]
    assert [r.sequence for r in reports] == list(range(len(reports)))
    states = [r.state for r in reports]
    assert states == sorted(states, key=[
        TrainerState.STARTING, TrainerState.RUNNING, TrainerState.FINISHED].index), states
    assert states[-1] == TrainerState.FINISHED
    doing = [r.progress.activity for r in reports]
    assert [a for a, s in zip(doing, states, strict=True) if s == TrainerState.STARTING] == [
        TrainerActivity.VERIFYING_INPUTS, TrainerActivity.RESTORING_CHECKPOINT,
        TrainerActivity.STARTING_ENGINES]
    # Training begins at step 0 and is said again after each step.
    assert [r.ledger.completed_steps for r in reports
            if r.progress.activity == TrainerActivity.TRAINING] == [0, 1, 2]
    # Then the final checkpoint, the inputs checked again, the artifact sealed, the end.
    assert doing[-4:] == [TrainerActivity.CHECKPOINTING, TrainerActivity.VERIFYING_INPUTS,
                          TrainerActivity.SEALING_ARTIFACT, TrainerActivity.SEALING_ARTIFACT]
    assert reports[-1].ledger.completed_steps == 2
    assert reports[-2].progress.remaining_seconds == 0.0  # no step left
    assert reports[-1].ledger.generated_tokens > 0
    final = reports[-1].terminal
    assert final.outcome == "Succeeded" and final.artifact.step == 2
    assert final.artifact.sha256 == DigestManifest.parse(
        (artifact / DIGEST_MANIFEST_FILE).read_text()).digest
    assert final.artifact.sha256 == DigestManifest.for_directory(
        artifact, exclude=[DIGEST_MANIFEST_FILE]).digest
    assert done.stdout.rstrip().endswith(exit_line(0))
