"""The demo's frozen inputs: a tiny model made offline and the letters dataset, at the hostPath
directories `examples/tiny-cpu.yaml` names."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import yaml

from grpo_operator.acceptance import HOST_PATH_PREFIXES_ENV

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "tiny-cpu.yaml"


def load_example() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def host_dirs(run: dict) -> dict[str, Path]:
    spec = run["spec"]
    return {
        "model": Path(spec["model"]["volume"]["hostPath"]["path"]),
        "data": Path(spec["dataset"]["volume"]["hostPath"]["path"]),
        "checkpoints": Path(spec["checkpoint"]["volume"]["hostPath"]["path"]),
    }


def host_root(run: dict) -> Path:
    """The directory holding all of the run's hostPath volumes."""
    return Path(os.path.commonpath([str(p) for p in host_dirs(run).values()]))


def operator_settings(root: Path) -> dict[str, str]:
    """The operator's environment for runs whose hostPath volumes lie under ``root``: it
    allows that directory and no other, so a run elsewhere is refused as on a real install."""
    return {HOST_PATH_PREFIXES_ENV: str(root)}


def relocate(run: dict, base: Path) -> dict:
    """The run with its hostPaths moved under ``base`` (tests use their own directory)."""
    spec = run["spec"]
    spec["model"]["volume"]["hostPath"]["path"] = str(base / "model")
    spec["dataset"]["volume"]["hostPath"]["path"] = str(base / "data")
    spec["checkpoint"]["volume"]["hostPath"]["path"] = str(base / "checkpoints")
    return run


def prepare(run: dict) -> dict[str, Path]:
    """Fresh model, data and an empty checkpoint directory where the run expects them."""
    from grpo_trainer import toy

    dirs = host_dirs(run)
    for path in dirs.values():
        shutil.rmtree(path, ignore_errors=True)
    toy.make_tiny_model(dirs["model"])
    toy.make_letters_dataset(dirs["data"])
    dirs["checkpoints"].mkdir(parents=True)
    return dirs
