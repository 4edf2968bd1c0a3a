"""W&B and MLflow beside the TensorBoard board, with the real libraries: W&B offline (its run
directory read back record by record), MLflow on a file store (read back with its client).
Both get the board's tags; a second attempt of the run continues the same runs; neither is on
unless the environment says so; a backend that fails costs one warning and never the step."""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import sys
import time
import uuid
import zlib
from dataclasses import replace
from pathlib import Path

import pytest
import wandb
import yaml
from mlflow import MlflowClient
from wandb.proto import wandb_internal_pb2

from grpo_operator.api.run_config import ResumeMode, RunConfig
from grpo_operator.api.spec import validate_manifest
from grpo_trainer.board import CHECKPOINT_TAG, TrainingBoard
from grpo_trainer.trackers import (
    UID_TAG,
    Sinks,
    TrackerUnavailableError,
    enabled_trackers,
)
from tests.trainer.step_records import STEP, evaluation
from tests.trainer.tensorboard_events import scalars as read_scalars

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def environment(monkeypatch, tmp_path):
    """No W&B or MLflow variable from outside; whatever W&B writes kept under tmp_path."""
    for name in [n for n in os.environ if n.startswith(("WANDB_", "MLFLOW_"))]:
        monkeypatch.delenv(name)
    for name in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home"))
    (tmp_path / "wandb-home").mkdir()
    yield
    # W&B reads the environment once per process, into its service: the next test's needs a
    # new one (as each attempt, a process of its own, has).
    wandb.teardown()


def run_config(uid: str, attempt: int = 1) -> RunConfig:
    manifest = yaml.safe_load((ROOT / "examples" / "tiny-cpu.yaml").read_text())
    manifest["spec"]["resources"]["env"] = [{"name": "SOME_TOKEN", "value": "s3cret"}]
    return RunConfig.build(
        spec=validate_manifest(manifest).spec, name="tiny-cpu", namespace="ns", uid=uid,
        attempt=attempt, resume=ResumeMode.NONE if attempt == 1 else ResumeMode.LATEST,
        report_config_map="tiny-cpu-report")


def attempt(config: RunConfig, board_dir: Path, steps: range, checkpoint: int | None = None
            ) -> Sinks:
    """One attempt's records: ``steps`` (reward step/10, an evaluation at the last), a
    checkpoint written in 1.25 s at ``checkpoint``."""
    sinks = Sinks(TrainingBoard(board_dir, first_step=steps[0]), enabled_trackers(config))
    for step in steps:
        metrics = replace(STEP, step=step, reward_mean=step / 10, time_update_s=0.5,
                          evaluation=evaluation(step, 0.25) if step == steps[-1] else None)
        sinks.record(metrics, metrics.figures())
        if step == checkpoint:
            sinks.checkpointed(step, 1.25)
    sinks.close()
    return sinks


def use_mlflow(monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 wants a database else


def mlflow_history(uid: str) -> tuple[str, dict[str, list[tuple[int, float]]]]:
    """The one MLflow run tagged with ``uid``: its id and its metrics' (step, value)s."""
    client = MlflowClient()
    (run,) = client.search_runs(["0"], filter_string=f"tags.{UID_TAG} = '{uid}'")
    return run.info.run_id, {
        key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
        for key in run.data.metrics}


def wandb_records(root: Path) -> list[wandb_internal_pb2.Record]:
    """Every record of the offline runs under ``root``, oldest run first: each ``.wandb``
    file is a LevelDB-style log (a 7-byte file header, then 32 KiB blocks of checksummed
    chunks) of W&B's own protobuf records."""
    wandb.teardown()  # W&B's service writes the files, whole once it has stopped
    records = []
    for path in sorted(root.glob("wandb/offline-run-*/run-*.wandb")):
        data, pos, pending = path.read_bytes(), 7, b""
        assert data[:4] == b":W&B"
        while pos + 7 <= len(data):
            if 32768 - pos % 32768 < 7:  # a block's tail too short for a header: padding
                pos += 32768 - pos % 32768
                continue
            checksum, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
            chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
            if kind == 0:  # zeroed padding
                continue
            assert zlib.crc32(bytes([kind]) + chunk) == checksum
            pending += chunk
            if kind in (1, 4):  # a full record, or the last chunk of one
                records.append(wandb_internal_pb2.Record.FromString(pending))
                pending = b""
    return records


def wandb_history(records) -> dict[str, list[tuple[int, float]]]:
    seen: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        if record.WhichOneof("record_type") == "history":
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)  # "a/b" is stored nested
                if not key.startswith("_"):  # W&B's own _step, _runtime, _timestamp
                    seen.setdefault(key, []).append(
                        (record.history.step.num, json.loads(item.value_json)))
    return seen


def wandb_runs(records) -> list[wandb_internal_pb2.RunRecord]:
    return [r.run for r in records if r.WhichOneof("record_type") == "run"]


def test_mlflow_gets_every_tag_of_the_board_at_its_step(monkeypatch, tmp_path):
    use_mlflow(monkeypatch, tmp_path)
    uid = str(uuid.uuid4())
    sinks = attempt(run_config(uid), tmp_path / "tb", range(1, 3), checkpoint=2)
    assert sinks.trackers == ["MLflow"]
    _, seen = mlflow_history(uid)
    assert seen["reward/mean"] == [(1, pytest.approx(0.1)), (2, pytest.approx(0.2))]
    assert seen["seconds/update"] == [(1, 0.5), (2, 0.5)]
    assert seen[CHECKPOINT_TAG] == [(2, 1.25)]
    assert seen["eval/pass_at_1"] == [(2, 0.25)]
    # The same tags as TensorBoard's, no more, no fewer.
    assert set(seen) == set(read_scalars(tmp_path / "tb"))


def test_wandb_gets_every_tag_of_the_board_at_its_step(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_PROJECT", "grpo-tests")
    uid = str(uuid.uuid4())
    sinks = attempt(run_config(uid), tmp_path / "tb", range(1, 3), checkpoint=2)
    assert sinks.trackers == ["W&B"]
    records = wandb_records(tmp_path / "wandb-home")
    (run,) = wandb_runs(records)
    assert (run.run_id, run.display_name, run.project) == (uid, "ns/tiny-cpu", "grpo-tests")
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["algorithm"]["maxSteps"] == 5
    assert "env" not in config["resources"]  # literal values there may be secrets
    seen = wandb_history(records)
    assert seen["reward/mean"] == [(1, pytest.approx(0.1)), (2, pytest.approx(0.2))]
    assert seen[CHECKPOINT_TAG] == [(2, 1.25)]
    assert seen["eval/pass_at_1"] == [(2, 0.25)]
    assert set(seen) == set(read_scalars(tmp_path / "tb"))


def test_a_second_attempt_continues_the_runs_of_the_first(monkeypatch, tmp_path):
    use_mlflow(monkeypatch, tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    uid = str(uuid.uuid4())
    attempt(run_config(uid), tmp_path / "tb", range(1, 3))
    first_run, _ = mlflow_history(uid)
    sinks = attempt(run_config(uid, attempt=2), tmp_path / "tb", range(3, 5))
    assert sinks.trackers == ["W&B", "MLflow"]
    run_id, seen = mlflow_history(uid)  # still exactly one run with the UID's tag
    assert run_id == first_run
    assert [step for step, _ in seen["reward/mean"]] == [1, 2, 3, 4]
    assert MlflowClient().get_run(run_id).info.status == "FINISHED"
    # Offline, each attempt writes a run directory of its own, both of the same W&B run.
    records = wandb_records(tmp_path / "wandb-home")
    assert [run.run_id for run in wandb_runs(records)] == [uid, uid]
    assert [step for step, _ in wandb_history(records)["reward/mean"]] == [1, 2, 3, 4]


def test_no_tracker_unless_the_environment_asks(monkeypatch):
    config = run_config(str(uuid.uuid4()))
    assert enabled_trackers(config) == []
    monkeypatch.setenv("WANDB_PROJECT", "p")
    monkeypatch.setenv("WANDB_MODE", "disabled")  # W&B's own off switch wins
    assert enabled_trackers(config) == []


def test_a_tracker_asked_for_without_its_package_fails_at_the_start(monkeypatch, tmp_path):
    use_mlflow(monkeypatch, tmp_path)
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed
    with pytest.raises(TrackerUnavailableError, match="MLFLOW_TRACKING_URI.*mlflow-skinny"):
        enabled_trackers(run_config(str(uuid.uuid4())))


@pytest.mark.parametrize("server", ["refusing", "silent"])
def test_a_failing_backend_costs_one_warning_and_never_holds_a_step_up(
        server, monkeypatch, tmp_path, caplog):
    with socket.socket() as listener:
        # Refusing: nothing listens on the port. Silent: connections are taken, never answered.
        listener.bind(("127.0.0.1", 0))
        if server == "silent":
            listener.listen()
        port = listener.getsockname()[1]
        if server == "refusing":
            listener.close()
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1")
        caplog.set_level(logging.WARNING, logger="grpo_trainer.trackers")
        sinks = Sinks(TrainingBoard(tmp_path / "tb", first_step=1),
                      enabled_trackers(run_config(str(uuid.uuid4()))))
        started = time.monotonic()
        for step in (1, 2, 3):
            sinks.record(replace(STEP, step=step), None)
        sinks.checkpointed(3, 1.25)
        assert time.monotonic() - started < 0.5  # no step waited for MLflow
        sinks.close()
    assert sinks.trackers == []  # dropped
    (warning,) = [r for r in caplog.records if r.name == "grpo_trainer.trackers"]
    assert warning.levelno == logging.WARNING
    assert warning.getMessage().startswith("MLflow: start failed, no more logging there")
    # The board wrote every step all the same.
    assert [step for step, _ in read_scalars(tmp_path / "tb")["reward/mean"]] == [1, 2, 3]
