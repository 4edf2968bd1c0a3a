"""Checkpoint directories per the contract's ``CheckpointLayout``: write, seal, keep K, verify.

A checkpoint of step N is written into ``step_N.tmp/``, sealed with its digest manifest
(``digest-manifest.txt``, covering every other file), fsynced, renamed to ``step_N/``; then the
``latest`` pointer is replaced atomically, and only then are older checkpoints beyond
``checkpoint.keep`` deleted. So at every instant the newest complete checkpoint is intact, and
a crash leaves at most a ``.tmp`` directory, which is never read (and is removed by the next
save). Resume takes the newest ``step_N/`` whose manifest verifies (``latest`` is a hint);
a corrupted one is skipped with a warning. ``save`` does it all in the caller's thread;
``begin`` and ``seal`` split it, for a checkpoint written while training goes on
(``checkpoint_writer``).

What goes into a checkpoint is the caller's (``attempt.py``): ``model/`` (Hugging Face
directory), ``learner/rank_R.pt`` (optimizer and RNG of each rank), ``trainer.json`` (step,
sampler, driver RNG), ``ledgers.json`` (cost ledger and rollout-ledger state).
"""

from __future__ import annotations

import datetime
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from grpo_operator.api.checkpoint_layout import (
    DIGEST_MANIFEST_FILE,
    TMP_SUFFIX,
    CheckpointLayout,
    complete_steps,
    format_latest,
    parse_step_dir_name,
)
from grpo_operator.api.digest import DigestManifest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SavedCheckpoint:
    """A complete, verified checkpoint."""

    step: int
    path: Path
    sha256: str  # digest of its manifest
    time: datetime.datetime
    write_seconds: float | None = None
    """How long writing, sealing and publishing it took, when this ``save`` wrote it (None:
    the step's checkpoint existed already)."""


@dataclass(frozen=True)
class StartedCheckpoint:
    """A checkpoint being written: ``begin``'s ``.tmp`` directory, until ``seal``."""

    step: int
    directory: Path
    perf_counter: float  # when it began


class CheckpointStore:
    """One run's checkpoint directory (``/checkpoints/<run-uid>``)."""

    def __init__(self, root: Path, keep: int) -> None:
        self.root = Path(root)
        self.layout = CheckpointLayout(self.root)  # type: ignore[arg-type]
        self.keep = keep
        self._written: dict[int, SavedCheckpoint] = {}  # by this process: no need to re-hash

    def step_dir(self, step: int) -> Path:
        return Path(self.layout.step_dir(step))

    def save(self, step: int, write: Callable[[Path], None]) -> SavedCheckpoint:
        """Write step ``step`` with ``write(directory)``, seal, publish, prune.

        A verified ``step_N/`` that exists already is kept as it is (e.g. a suspend right
        after a resume): a checkpoint of a step is never rewritten, and the one returned then
        has no ``write_seconds``.
        """
        started = self.begin(step)
        if isinstance(started, SavedCheckpoint):
            return started
        write(started.directory)
        return self.seal(started)

    def begin(self, step: int) -> SavedCheckpoint | StartedCheckpoint:
        """The existing checkpoint of ``step`` (see ``save``), or an empty ``.tmp`` directory
        to write it into before ``seal``."""
        existing = self._written.get(step) or self.verify(step)
        if existing is not None and existing.path.is_dir():
            return existing
        started = StartedCheckpoint(step, Path(self.layout.tmp_dir(step)), time.perf_counter())
        self.root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(started.directory, ignore_errors=True)
        started.directory.mkdir()
        return started

    def seal(self, started: StartedCheckpoint) -> SavedCheckpoint:
        """Seal what was written into ``started.directory``, publish it, prune; the
        ``write_seconds`` count from ``begin``."""
        step, tmp = started.step, started.directory
        final = self.step_dir(step)
        manifest = DigestManifest.for_directory(tmp, exclude=[DIGEST_MANIFEST_FILE])
        (tmp / DIGEST_MANIFEST_FILE).write_text(manifest.render())
        _fsync_tree(tmp)
        if final.exists():  # an unverifiable leftover of the same step
            shutil.rmtree(final)
        tmp.rename(final)
        _fsync_dir(self.root)
        self._write_latest(step)
        saved = SavedCheckpoint(step, final, manifest.digest, _now())
        self._written[step] = saved
        self._prune()
        write_seconds = time.perf_counter() - started.perf_counter
        log.info("checkpoint step %d written to %s in %.2f s (sha256 %s)", step, final,
                 write_seconds, saved.sha256)
        return replace(saved, write_seconds=write_seconds)

    def _write_latest(self, step: int) -> None:
        latest = Path(self.layout.latest_file)
        tmp = latest.with_name(latest.name + TMP_SUFFIX)
        with open(tmp, "w") as fh:
            fh.write(format_latest(step))
            fh.flush()
            os.fsync(fh.fileno())
        tmp.rename(latest)
        _fsync_dir(self.root)

    def _prune(self) -> None:
        """Keep the newest ``keep`` complete checkpoints; drop every stale ``.tmp``."""
        for step in complete_steps(self.root)[: -self.keep]:
            shutil.rmtree(self.step_dir(step), ignore_errors=True)
        for path in self.root.iterdir():
            stem = path.name.removesuffix(TMP_SUFFIX)
            if path.is_dir() and stem != path.name and parse_step_dir_name(stem) is not None:
                shutil.rmtree(path, ignore_errors=True)

    def verify(self, step: int) -> SavedCheckpoint | None:
        """The checkpoint of ``step`` when its directory exists and its manifest verifies."""
        path = self.step_dir(step)
        if not path.is_dir():
            return None
        try:
            manifest = DigestManifest.parse((path / DIGEST_MANIFEST_FILE).read_text())
            problems = manifest.verify(path, exact=True)
        except (OSError, ValueError) as err:
            problems = [str(err)]
        problems = [p for p in problems if not p.startswith(f"{DIGEST_MANIFEST_FILE}:")]
        if problems:
            log.warning("checkpoint %s does not verify, skipping it: %s", path,
                        "; ".join(problems[:3]))
            return None
        mtime = (path / DIGEST_MANIFEST_FILE).stat().st_mtime
        when = datetime.datetime.fromtimestamp(int(mtime), datetime.UTC)
        return SavedCheckpoint(step, path, manifest.digest, when)

    def newest_valid(self) -> SavedCheckpoint | None:
        """The newest complete checkpoint whose manifest verifies (``.tmp`` never counts)."""
        for step in reversed(complete_steps(self.root)):
            found = self.verify(step)
            if found is not None:
                return found
        return None

    def drop_newer_than(self, step: int) -> None:
        """Remove checkpoints newer than ``step`` (the unverifiable ones a resume skipped:
        they belong to an abandoned timeline and must never be picked later)."""
        for other in complete_steps(self.root):
            if other > step:
                log.warning("removing checkpoint step %d (newer than the resumed step %d)",
                            other, step)
                shutil.rmtree(self.step_dir(other), ignore_errors=True)


def copy_sealed_model(checkpoint: Path, staging: Path) -> None:
    """Copy a checkpoint's ``model/`` to ``staging`` (the artifact, sealed by the caller)."""
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(checkpoint / "model", staging)


def _fsync_tree(root: Path) -> None:
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)
