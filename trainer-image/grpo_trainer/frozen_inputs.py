"""Frozen inputs: the model directory and the dataset's files, verified by digest.

At the start each input's digest manifest (``grpo_operator.api.digest``) is computed; when the
spec carries a digest (``model.sha256``, ``dataset.sha256``) it must match, and so must the
digest an earlier attempt found (the run config's ``inputs``, from status.recovery.inputs), so
an input swapped between attempts is found whether or not the spec named a digest. At the end
the files are checked against the manifest recorded at the start, so a change during the
attempt is found too. The model's digest covers every file of the model
directory; the dataset's covers ``trainFile`` and ``validationFile``, relative to the dataset
volume's root (the contract's ``inputs.py``); a python reward's file is a third input
(``reward``). Inputs are opened read-only, never written.

Also ``python -m grpo_trainer digest PATH [FILES...]``: the digest a user puts in the spec.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field
from pathlib import Path

from grpo_operator.api.checkpoint_layout import DIGEST_MANIFEST_FILE
from grpo_operator.api.digest import DigestManifest
from grpo_operator.api.status import InputDigests

log = logging.getLogger(__name__)


class MissingInputError(Exception):
    """An input file or directory is missing or unusable at the start (exit INVALID_INPUT)."""


class FrozenInputChangedError(Exception):
    """An input differs from its spec digest or from the start (exit FROZEN_INPUT_CHANGED)."""


@dataclass
class FrozenInput:
    """One input: a whole directory (``files`` None) or a file set under ``root``."""

    name: str  # "model", "dataset" or "reward"
    root: Path
    files: tuple[str, ...] | None
    expected: str | None  # the spec's sha256, when given
    seen_before: str | None  # what an earlier attempt of the run found
    spec_field: str = ""  # where the spec's sha256 is; default spec.<name>.sha256
    recorded: DigestManifest | None = field(default=None, init=False)

    def manifest(self) -> DigestManifest:
        if self.files is None:
            return DigestManifest.for_directory(self.root)
        return DigestManifest.for_files(self.root, self.files)

    def record(self) -> str:
        """Compute the manifest at the start; check it against the spec's digest."""
        try:
            manifest = self.manifest()
        except (FileNotFoundError, NotADirectoryError) as err:
            raise MissingInputError(f"{self.name} input is missing: {err}") from None
        except (OSError, ValueError) as err:  # unreadable; a symlink to a directory
            raise MissingInputError(f"{self.name} input is unusable: {err}") from None
        if self.expected is not None and manifest.digest != self.expected:
            raise FrozenInputChangedError(
                f"{self.name} at {self.root} has digest {manifest.digest}, but "
                f"{self.spec_field or f'spec.{self.name}.sha256'} is {self.expected}: the "
                f"{self.name} is not the one the run was created for"
            )
        if self.seen_before is not None and manifest.digest != self.seen_before:
            raise FrozenInputChangedError(
                f"{self.name} at {self.root} has digest {manifest.digest}, but an earlier "
                f"attempt of this run found {self.seen_before}: the {self.name} changed "
                "between attempts"
            )
        self.recorded = manifest
        return manifest.digest

    def verify(self) -> None:
        """Check the files against the manifest recorded at the start."""
        if self.recorded is None:
            raise RuntimeError(f"{self.name}: record() was not called")
        problems = self.recorded.verify(self.root, exact=self.files is None)
        if problems:
            shown = "; ".join(problems[:5]) + ("; ..." if len(problems) > 5 else "")
            raise FrozenInputChangedError(
                f"{self.name} at {self.root} changed during the run (digest at start "
                f"{self.recorded.digest}): {shown}"
            )


class FrozenInputs:
    """The run's frozen inputs (model, dataset, and a python reward's file)."""

    def __init__(self, inputs: list[FrozenInput]) -> None:
        self.inputs = inputs

    @classmethod
    def from_config(cls, config) -> FrozenInputs:
        """From a contract ``RunConfig``: /model whole, the dataset's files under /data, the
        reward file where the paths say."""
        spec = config.spec
        files = [spec.dataset.train_file]
        if spec.dataset.validation_file:
            files.append(spec.dataset.validation_file)
        seen = config.inputs
        inputs = [
            FrozenInput("model", Path(config.paths.model_dir), None, spec.model.sha256,
                        seen.model if seen else None),
            FrozenInput("dataset", Path(config.paths.data_dir), tuple(files),
                        spec.dataset.sha256, seen.dataset if seen else None),
        ]
        reward_file = config.paths.reward_file
        if spec.reward.python is not None and reward_file is not None:
            path = Path(reward_file)
            inputs.append(FrozenInput("reward", path.parent, (path.name,),
                                      spec.reward.python.sha256, seen.reward if seen else None,
                                      spec_field="spec.reward.python.sha256"))
        return cls(inputs)

    def record(self) -> InputDigests:
        """Digests at the start (raises on a missing or different input)."""
        digests = {i.name: i.record() for i in self.inputs}
        for name, digest in digests.items():
            log.info("frozen input %s: sha256 %s", name, digest)
        return InputDigests(**digests)

    def verify(self) -> None:
        """Raise FrozenInputChangedError naming every input that changed since the start."""
        errors = []
        for item in self.inputs:
            try:
                item.verify()
            except FrozenInputChangedError as err:
                errors.append(str(err))
        if errors:
            raise FrozenInputChangedError(" | ".join(errors))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``digest`` subcommand."""
    p = subparsers.add_parser(
        "digest",
        help="print the sha256 digest of a model directory or a dataset's files",
        description="Print the digest to put in spec.model.sha256 (PATH = the model directory) "
        "or spec.dataset.sha256 (PATH = the dataset volume's root, FILES = trainFile and "
        "validationFile relative to it).",
    )
    p.add_argument("path", type=Path, help="a directory")
    p.add_argument("files", nargs="*", help="files relative to PATH (default: every file)")
    p.add_argument("--manifest", action="store_true", help="print the digest manifest itself")
    p.add_argument(
        "--sealed", action="store_true",
        help=f"PATH is a sealed directory (artifact or checkpoint): leave out its "
        f"{DIGEST_MANIFEST_FILE} and fail unless the stored manifest matches the files",
    )
    p.set_defaults(handler=digest_main)


def digest_main(args: argparse.Namespace) -> int:
    import sys

    try:
        if args.files:
            manifest = DigestManifest.for_files(args.path, args.files)
        else:
            exclude = [DIGEST_MANIFEST_FILE] if args.sealed else []
            manifest = DigestManifest.for_directory(args.path, exclude=exclude)
        if args.sealed:
            stored = DigestManifest.parse((args.path / DIGEST_MANIFEST_FILE).read_text())
            if stored != manifest:
                print(f"{args.path}: the files do not match {DIGEST_MANIFEST_FILE}",
                      file=sys.stderr)
                return 1
    except (OSError, ValueError) as err:
        print(f"digest: {err}", file=sys.stderr)
        return 2
    sys.stdout.write(manifest.render() if args.manifest else manifest.digest + "\n")
    return 0
