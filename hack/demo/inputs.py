"""The demo's frozen inputs: a tiny model made offline and the letters dataset, at the hostPath
directories `examples/tiny-cpu.yaml` names."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

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
