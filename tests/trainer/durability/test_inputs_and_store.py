"""Frozen inputs and the digest command, the checkpoint store's layout rules, the budget's
arithmetic — without engines (the `run` command exits before starting Ray)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_operator.api.checkpoint_layout import DIGEST_MANIFEST_FILE, parse_latest
from grpo_operator.api.digest import DigestManifest, digest_of_directory, digest_of_files
from grpo_operator.api.exit_codes import ExitCode
from grpo_operator.api.report import TrainerState, parse_report
from grpo_trainer.checkpoint import CheckpointStore
from grpo_trainer.driver.outcome import exit_line
from grpo_trainer.frozen_inputs import FrozenInputChangedError, FrozenInputs
from grpo_trainer.progress import seal
from grpo_trainer.reporting import parse_report_line

from .conftest import make_config


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.run([sys.executable, "-m", "grpo_trainer", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_digest_command_prints_the_contracts_digests(tiny_dirs):
    model, data = tiny_dirs["model"], tiny_dirs["data"]
    assert _cli("digest", str(model)).stdout == digest_of_directory(model) + "\n"
    files = ["train.parquet", "test.parquet"]
    assert _cli("digest", str(data), *files).stdout == digest_of_files(data, files) + "\n"
    shown = _cli("digest", "--manifest", str(model)).stdout
    assert DigestManifest.parse(shown).digest == digest_of_directory(model)
    assert _cli("digest", str(data / "nope")).returncode == 2


def test_digest_sealed_checks_an_artifact_against_its_manifest(tiny_dirs, tmp_path):
    artifact = Path(shutil.copytree(tiny_dirs["model"], tmp_path / "artifact"))
    digest = seal(artifact)
    assert _cli("digest", "--sealed", str(artifact)).stdout == digest + "\n"
    (artifact / "config.json").write_text("{}")
    assert _cli("digest", "--sealed", str(artifact)).returncode == 1


def _data_copy(tiny_dirs, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny_dirs["data"], tmp_path / "data"))


def test_frozen_inputs_find_a_change_during_the_run(tiny_dirs, tmp_path):
    data = _data_copy(tiny_dirs, tmp_path)
    config = make_config(tiny_dirs, tmp_path / "uid-f", data_dir=data)
    frozen = FrozenInputs.from_config(config)
    digests = frozen.record()
    assert digests.dataset == digest_of_files(data, ["train.parquet"])
    frozen.verify()  # unchanged
    (data / "test.parquet").write_bytes(b"not covered: only trainFile is in the dataset digest")
    frozen.verify()
    with open(data / "train.parquet", "ab") as fh:
        fh.write(b"\0")
    with pytest.raises(FrozenInputChangedError, match=r"dataset .* changed during the run"):
        frozen.verify()


def test_a_later_attempt_must_find_the_inputs_an_earlier_one_found(tiny_dirs, tmp_path):
    """Without a digest in the spec: the run config carries what an earlier attempt reported
    (status.recovery.inputs), and an input swapped since is refused, naming both digests."""
    model = Path(shutil.copytree(tiny_dirs["model"], tmp_path / "model"))
    dirs = {**tiny_dirs, "model": model}
    first = FrozenInputs.from_config(make_config(dirs, tmp_path / "uid-a"))
    seen = first.record()
    assert seen.model == digest_of_directory(model)
    later = make_config(dirs, tmp_path / "uid-a", attempt=2).model_copy(update={"inputs": seen})
    assert FrozenInputs.from_config(later).record() == seen  # unchanged: admitted
    (model / "README.md").write_text("a file the first attempt did not see")
    with pytest.raises(FrozenInputChangedError, match=(
            f"model at {model} has digest {digest_of_directory(model)}, but an earlier attempt "
            f"of this run found {seen.model}: the model changed between attempts")):
        FrozenInputs.from_config(later).record()
    # The same config without the earlier digests would have admitted the new model.
    assert FrozenInputs.from_config(later.model_copy(update={"inputs": None})).record()


def test_a_python_rewards_file_is_a_frozen_input(tiny_dirs, tmp_path):
    """Its digest is recorded with the others, pinned by spec.reward.python.sha256 when given,
    and must be the same for every attempt, as the model's and the dataset's."""
    code = tmp_path / "reward" / "reward.py"
    code.parent.mkdir()
    code.write_text("def score(c, t, e):\n    return 1.0\n")
    digest = digest_of_files(code.parent, ["reward.py"])

    def config(attempt=1, inputs=None, sha256=None):
        python = {"configMap": "my-reward", **({"sha256": sha256} if sha256 else {})}
        made = make_config(tiny_dirs, tmp_path / "uid-r", attempt=attempt,
                           spec_patch={"reward": {"name": "python", "python": python,
                                                      "pattern": None}})
        paths = made.paths.model_copy(update={"reward_file": str(code)})
        return made.model_copy(update={"paths": paths, "inputs": inputs})

    seen = FrozenInputs.from_config(config()).record()
    assert seen.reward == digest
    assert FrozenInputs.from_config(config(2, seen, sha256=digest)).record() == seen
    code.write_text("def score(c, t, e):\n    return 0.0\n")
    with pytest.raises(FrozenInputChangedError, match="the reward changed between attempts"):
        FrozenInputs.from_config(config(2, seen)).record()
    with pytest.raises(FrozenInputChangedError, match=f"spec.reward.python.sha256 is {digest}"):
        FrozenInputs.from_config(config(sha256=digest)).record()
    assert FrozenInputs.from_config(make_config(tiny_dirs, tmp_path / "uid-b")).record().reward \
        is None  # a built-in reward has no file


def _run_cli(config, tmp_path: Path) -> tuple[subprocess.CompletedProcess, list]:
    path = tmp_path / "run-config.json"
    path.write_text(config.to_json())
    done = _cli("run", "--config", str(path))
    reports = [parse_report(found[0]) for line in done.stdout.splitlines()
               if (found := parse_report_line(line))]
    return done, reports


def test_run_refuses_inputs_that_differ_from_the_spec_digest(tiny_dirs, tmp_path):
    wrong = "0" * 64
    config = make_config(tiny_dirs, tmp_path / "uid-d", spec_patch={
        "model": {"sha256": wrong}})
    done, reports = _run_cli(config, tmp_path)
    assert done.returncode == ExitCode.FROZEN_INPUT_CHANGED, done.stdout[-2000:]
    assert done.stdout.rstrip().endswith(exit_line(11))
    final = reports[-1]
    assert final.state == TrainerState.FINISHED and final.terminal.reason == "FrozenInputChanged"
    assert wrong in final.terminal.message and digest_of_directory(tiny_dirs["model"]) in (
        final.terminal.message)
    assert not (tmp_path / "uid-d").exists()  # nothing was trained or written

    right = digest_of_directory(tiny_dirs["model"])
    data = _data_copy(tiny_dirs, tmp_path)
    (data / "train.parquet").unlink()
    config = make_config(tiny_dirs, tmp_path / "uid-m", data_dir=data,
                         spec_patch={"model": {"sha256": right}})
    done, reports = _run_cli(config, tmp_path)
    assert done.returncode == ExitCode.INVALID_INPUT
    assert reports[-1].terminal.reason == "InvalidInput"
    assert "dataset input is missing" in reports[-1].terminal.message


def _write(content: str):
    def write(directory: Path) -> None:
        (directory / "model").mkdir()
        (directory / "model" / "weights.bin").write_text(content)
        (directory / "state.json").write_text("{}")
    return write


def test_store_keeps_k_publishes_latest_last_and_skips_what_does_not_verify(tmp_path):
    store = CheckpointStore(tmp_path / "uid-s", keep=2)
    saved = [store.save(step, _write(f"w{step}")) for step in (2, 4, 6)]
    assert sorted(p.name for p in store.root.iterdir()) == ["latest", "step_4", "step_6"]
    assert parse_latest((store.root / "latest").read_text()) == 6
    manifest = DigestManifest.parse((store.root / "step_6" / DIGEST_MANIFEST_FILE).read_text())
    assert saved[-1].sha256 == manifest.digest and "model/weights.bin" in {
        e.path for e in manifest.entries}
    assert all(s.write_seconds is not None and s.write_seconds >= 0 for s in saved)
    again = store.save(6, _write("never written"))
    assert again.sha256 == saved[-1].sha256 and again.write_seconds is None  # not rewritten

    # A truncated step_8.tmp (a crash while writing) is never used; a corrupted step_6 is
    # skipped with a warning; step_4 is the one to resume from.
    (store.root / "step_8.tmp" / "model").mkdir(parents=True)
    (store.root / "step_8.tmp" / "model" / "weights.bin").write_text("w")
    (store.root / "step_6" / "model" / "weights.bin").write_text("bit rot")
    newest = store.newest_valid()
    assert newest.step == 4 and newest.sha256 == saved[1].sha256
    store.drop_newer_than(4)
    assert not (store.root / "step_6").exists()
    store.save(5, _write("w5"))  # the next save clears the stale .tmp
    assert sorted(p.name for p in store.root.iterdir()) == ["latest", "step_4", "step_5"]
