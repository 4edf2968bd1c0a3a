"""Run config, digest manifests, checkpoint layout and exit codes."""

from __future__ import annotations

import json
import os

import pytest

from grpo_operator.api.checkpoint_layout import (
    CheckpointLayout,
    complete_steps,
    format_latest,
    parse_latest,
    parse_step_dir_name,
)
from grpo_operator.api.constants import Outcome, Reason
from grpo_operator.api.digest import (
    DigestManifest,
    digest_of_directory,
    digest_of_files,
)
from grpo_operator.api.exit_codes import NON_RETRYABLE_EXIT_CODES, ExitCode, classify_exit
from grpo_operator.api.run_config import (
    RUN_CONFIG_ENV,
    ResumeMode,
    RunConfig,
    RunConfigError,
)
from grpo_operator.api.spec import validate_manifest
from tests.operator.api.manifests import base_manifest

UID = "6f1c2a9e-0b7d-4f5e-9d3a-2c1b0a9f8e7d"


def _config(**overrides) -> RunConfig:
    spec = validate_manifest(base_manifest()).spec
    args = dict(
        spec=spec,
        name="base-run",
        namespace="ns",
        uid=UID,
        attempt=3,
        resume=ResumeMode.LATEST,
        report_config_map="base-run-report",
    )
    args.update(overrides)
    return RunConfig.build(**args)


def test_run_config_round_trip_and_paths(tmp_path, monkeypatch):
    config = _config()
    assert config.paths.model_dir == "/model"
    assert config.paths.train_file == "/data/gsm8k/train.parquet"
    assert config.paths.validation_file == "/data/gsm8k/test.parquet"
    assert config.paths.checkpoint_dir == f"/checkpoints/{UID}"
    path = tmp_path / "run-config.json"
    path.write_text(config.to_json())
    monkeypatch.setenv(RUN_CONFIG_ENV, str(path))
    loaded = RunConfig.load()
    assert loaded == config
    assert loaded.spec.reward.name.value == "gsm8k"
    assert json.loads(config.to_json())["reportKey"] == "report.json"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.update(schemaVersion=2), "schemaVersion"),
        (lambda d: d.update(attempt="3"), "attempt"),
        (lambda d: d.update(resume="always"), "resume"),
        (lambda d: d["spec"]["algorithm"].update(groupSize=1), "spec.algorithm.groupSize"),
        (lambda d: d["run"].update(uid="../x"), "run.uid"),
        (lambda d: d.update(surprise=True), "surprise"),
    ],
)
def test_run_config_is_strict(change, field):
    doc = json.loads(_config().to_json())
    change(doc)
    with pytest.raises(RunConfigError) as refused:
        RunConfig.from_json(json.dumps(doc))
    assert field in str(refused.value)


def test_missing_run_config_is_a_run_config_error(tmp_path):
    with pytest.raises(RunConfigError, match="cannot read"):
        RunConfig.load(tmp_path / "absent.json")


def _tree(root):
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_text('{"a": 1}')
    (root / "sub" / "weights.bin").write_bytes(b"\x00" * 1000)
    (root / "b c.txt").write_text("space in the name")


def test_digest_manifest_is_canonical_and_verifies(tmp_path):
    _tree(tmp_path)
    manifest = DigestManifest.for_directory(tmp_path)
    text = manifest.render()
    assert text.splitlines()[0] == "grpo-digest-manifest v1"
    assert [e.path for e in manifest.entries] == ["b c.txt", "config.json", "sub/weights.bin"]
    assert DigestManifest.parse(text) == manifest
    assert manifest.digest == digest_of_directory(tmp_path)
    assert len(manifest.digest) == 64
    assert manifest.verify(tmp_path) == []


def test_digest_changes_with_content_and_verification_says_where(tmp_path):
    _tree(tmp_path)
    manifest = DigestManifest.for_directory(tmp_path)
    (tmp_path / "config.json").write_text('{"a": 2}')
    (tmp_path / "new.txt").write_text("x")
    assert digest_of_directory(tmp_path) != manifest.digest
    assert manifest.verify(tmp_path) == [
        "config.json: sha256 differs",
        "new.txt: not in the manifest",
    ]
    (tmp_path / "sub" / "weights.bin").unlink()
    assert "sub/weights.bin: missing" in manifest.verify(tmp_path)


def test_digest_of_a_file_set_ignores_other_files(tmp_path):
    _tree(tmp_path)
    before = digest_of_files(tmp_path, ["config.json", "sub/weights.bin"])
    (tmp_path / "unrelated").write_text("x")
    assert digest_of_files(tmp_path, ["sub/weights.bin", "config.json"]) == before
    manifest = DigestManifest.for_files(tmp_path, ["config.json"])
    assert manifest.verify(tmp_path, exact=False) == []


def test_file_symlinks_hash_by_content_directory_symlinks_are_refused(tmp_path):
    root = tmp_path / "m"
    root.mkdir()
    (tmp_path / "blob").write_text("weights")
    os.symlink(tmp_path / "blob", root / "model.safetensors")
    assert DigestManifest.for_directory(root).entries[0].size == len("weights")
    os.symlink(tmp_path, root / "loop")
    with pytest.raises(ValueError, match="symbolic link"):
        DigestManifest.for_directory(root)


@pytest.mark.parametrize(
    "text",
    [
        "grpo-digest-manifest v2\n",
        "grpo-digest-manifest v1",
        f"grpo-digest-manifest v1\n{'a' * 64} 1 b\n{'a' * 64} 1 a\n",
        f"grpo-digest-manifest v1\n{'a' * 64} 01 a\n",
        f"grpo-digest-manifest v1\n{'A' * 64} 1 a\n",
        f"grpo-digest-manifest v1\n{'a' * 64} 1 ../a\n",
        f"grpo-digest-manifest v1\n{'a' * 64} 1 a\n{'a' * 64} 1 a\n",
    ],
)
def test_non_canonical_manifests_are_refused(text):
    with pytest.raises(ValueError):
        DigestManifest.parse(text)


def test_checkpoint_layout(tmp_path):
    layout = CheckpointLayout.for_run(UID)
    assert str(layout.step_dir(12)) == f"/checkpoints/{UID}/step_12"
    assert str(layout.tmp_dir(12)) == f"/checkpoints/{UID}/step_12.tmp"
    assert str(layout.latest_file) == f"/checkpoints/{UID}/latest"
    assert str(layout.artifact_dir) == f"/checkpoints/{UID}/artifact"
    assert parse_latest(format_latest(12)) == 12
    assert parse_step_dir_name("step_12.tmp") is None
    assert parse_step_dir_name("step_012") is None
    for bad in ("step_3", "step_x\n", "step_1\nstep_2\n", "latest\n"):
        with pytest.raises(ValueError):
            parse_latest(bad)
    with pytest.raises(ValueError):
        CheckpointLayout.for_run("../other")
    for name in ("step_2", "step_10", "step_3.tmp", "artifact"):
        (tmp_path / name).mkdir()
    assert complete_steps(tmp_path) == [2, 10]


def test_exit_codes_are_below_128_and_distinct():
    assert all(0 <= int(code) < 128 for code in ExitCode)
    assert len({int(code) for code in ExitCode}) == len(ExitCode)
    assert 0 not in NON_RETRYABLE_EXIT_CODES


@pytest.mark.parametrize(
    ("code", "retryable", "outcome", "reason"),
    [
        (0, False, Outcome.SUCCEEDED, Reason.COMPLETED),
        (ExitCode.INVALID_INPUT, False, Outcome.FAILED, Reason.INVALID_INPUT),
        (ExitCode.FROZEN_INPUT_CHANGED, False, Outcome.FAILED, Reason.FROZEN_INPUT_CHANGED),
        (ExitCode.BUDGET_EXHAUSTED, False, Outcome.FAILED, Reason.BUDGET_EXHAUSTED),
        (ExitCode.SUSPENDED, False, None, Reason.SUSPENDED),
        (ExitCode.RETRYABLE_FAILURE, True, None, Reason.RETRYABLE_FAILURE),
        (ExitCode.WEIGHT_SYNC_INCOMPLETE, False, Outcome.FAILED, Reason.WEIGHT_SYNC_INCOMPLETE),
        (ExitCode.WEIGHT_SYNC_MISMATCH, True, None, Reason.WEIGHT_SYNC_MISMATCH),
        (ExitCode.REPORT_NOT_WRITTEN, True, None, Reason.REPORT_NOT_WRITTEN),
        (1, True, None, Reason.UNEXPECTED_EXIT),
        (137, True, None, Reason.KILLED),
        (None, True, None, Reason.POD_VANISHED),
    ],
)
def test_classify_exit(code, retryable, outcome, reason):
    got = classify_exit(None if code is None else int(code))
    assert (got.retryable, got.outcome, got.reason) == (retryable, outcome, reason)
    assert got.message


def test_non_retryable_codes_are_exactly_the_failures_that_end_the_run():
    ending = {
        int(c)
        for c in ExitCode
        if not classify_exit(int(c)).retryable and classify_exit(int(c)).outcome is Outcome.FAILED
    }
    assert set(NON_RETRYABLE_EXIT_CODES) == ending
