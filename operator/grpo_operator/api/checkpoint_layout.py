"""The layout of a run's checkpoint directory, shared by the trainer and the operator.

    /checkpoints/<run-uid>/            the run's directory (keyed by UID: a recreated run with
                                       the same name never resumes someone else's state)
        step_N/                        a complete checkpoint of optimizer step N
            model/                     Hugging Face directory: config, tokenizer, safetensors
            digest-manifest.txt        digest manifest of every other file of step_N/
            ...                        optimizer, sampler, RNG and ledger state (trainer's own)
        step_N.tmp/                    a checkpoint being written; renamed to step_N/ when done
        latest                         pointer to the newest complete checkpoint, written last
        artifact/                      the final model (Hugging Face directory) and its
                                       digest-manifest.txt
        rollouts/                      append-only journal of sealed rollouts
        tensorboard/                   TensorBoard event files, one file per attempt

`latest` holds one line, the directory name and a newline: `step_N\\n`. It is replaced
atomically (write `latest.tmp`, fsync, rename) after step_N/ is complete. Resume picks the
newest step_N/ whose manifest verifies (`latest` is a hint, not the authority).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

CHECKPOINT_MOUNT = "/checkpoints"
STEP_PREFIX = "step_"
TMP_SUFFIX = ".tmp"
LATEST_FILE = "latest"
ARTIFACT_DIR = "artifact"
ROLLOUT_JOURNAL_DIR = "rollouts"
TENSORBOARD_DIR = "tensorboard"
MODEL_SUBDIR = "model"
DIGEST_MANIFEST_FILE = "digest-manifest.txt"

_STEP_RE = re.compile(r"step_(0|[1-9][0-9]*)")
_UID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")


def step_dir_name(step: int) -> str:
    """`step_N` for step N >= 0 (no zero padding)."""
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    return f"{STEP_PREFIX}{step}"


def parse_step_dir_name(name: str) -> int | None:
    """N for a complete checkpoint's directory name `step_N`; None for anything else
    (including `step_N.tmp`)."""
    match = _STEP_RE.fullmatch(name)
    return int(match.group(1)) if match else None


def format_latest(step: int) -> str:
    """The content of the `latest` pointer naming step_N/."""
    return step_dir_name(step) + "\n"


def parse_latest(text: str) -> int:
    """The step a `latest` pointer names; ValueError when it is not exactly `step_N\\n`."""
    if not text.endswith("\n") or text.count("\n") != 1:
        raise ValueError("latest must be one line ending in a newline")
    step = parse_step_dir_name(text[:-1])
    if step is None:
        raise ValueError(f"latest must name a step_N directory, got {text[:-1]!r}")
    return step


@dataclass(frozen=True)
class CheckpointLayout:
    """Paths of one run's checkpoint directory (in-pod by default; any root for tests)."""

    root: PurePosixPath

    @classmethod
    def for_run(cls, run_uid: str, mount: str = CHECKPOINT_MOUNT) -> CheckpointLayout:
        if not _UID_RE.fullmatch(run_uid):
            raise ValueError(f"not a usable run UID: {run_uid!r}")
        return cls(PurePosixPath(mount) / run_uid)

    def step_dir(self, step: int) -> PurePosixPath:
        return self.root / step_dir_name(step)

    def tmp_dir(self, step: int) -> PurePosixPath:
        return self.root / (step_dir_name(step) + TMP_SUFFIX)

    def model_dir(self, step: int) -> PurePosixPath:
        return self.step_dir(step) / MODEL_SUBDIR

    def manifest_file(self, step: int) -> PurePosixPath:
        return self.step_dir(step) / DIGEST_MANIFEST_FILE

    @property
    def latest_file(self) -> PurePosixPath:
        return self.root / LATEST_FILE

    @property
    def artifact_dir(self) -> PurePosixPath:
        return self.root / ARTIFACT_DIR

    @property
    def journal_dir(self) -> PurePosixPath:
        return self.root / ROLLOUT_JOURNAL_DIR

    @property
    def tensorboard_dir(self) -> PurePosixPath:
        return self.root / TENSORBOARD_DIR


def complete_steps(run_dir: Path) -> list[int]:
    """Steps with a complete (renamed) checkpoint directory under `run_dir`, ascending.
    Completeness of the contents is checked by verifying each one's digest manifest."""
    if not run_dir.is_dir():
        return []
    steps = (parse_step_dir_name(p.name) for p in run_dir.iterdir() if p.is_dir())
    return sorted(s for s in steps if s is not None)
