"""``python -m grpo_trainer run --config FILE`` trains locally and writes a loadable model."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from grpo_operator.api.run_config import ResumeMode, RunConfig, RunIdentity, RunPaths
from grpo_operator.api.spec import GRPORunSpec
from grpo_trainer import toy


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
