"""The digest manifest: a canonical listing of files whose own sha256 is the input's digest.

Format (UTF-8 text, `\\n` line ends):

    grpo-digest-manifest v1
    <sha256 hex> <size in bytes> <relative path>
    ...

one line per regular file, sorted by the path's UTF-8 bytes, paths relative to the root with
`/` separators. The digest of a model directory, a dataset's file set or a checkpoint is the
sha256 of this text. Symbolic links to files are hashed by content (Hugging Face caches use
them); symbolic links to directories are refused (they could loop or leave the root).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MANIFEST_HEADER = "grpo-digest-manifest v1"
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class ManifestEntry:
    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class DigestManifest:
    """A canonical listing; construct with `build`, `for_directory`, `for_files` or `parse`."""

    entries: tuple[ManifestEntry, ...]

    @classmethod
    def build(cls, entries: Iterable[ManifestEntry]) -> DigestManifest:
        ordered = tuple(sorted(entries, key=lambda e: e.path.encode()))
        for entry in ordered:
            _check_entry(entry)
        paths = [e.path for e in ordered]
        if len(set(paths)) != len(paths):
            raise ValueError("duplicate path in digest manifest")
        return cls(ordered)

    @classmethod
    def for_directory(cls, root: Path, exclude: Iterable[str] = ()) -> DigestManifest:
        """Every regular file under `root`, except the relative paths in `exclude`."""
        skip = set(exclude)
        return cls.build(_entry(root, rel) for rel in _walk(root) if rel not in skip)

    @classmethod
    def for_files(cls, root: Path, files: Iterable[str]) -> DigestManifest:
        """The given files, as paths relative to `root`."""
        return cls.build(_entry(root, _normalise(rel)) for rel in files)

    def render(self) -> str:
        lines = [MANIFEST_HEADER] + [f"{e.sha256} {e.size} {e.path}" for e in self.entries]
        return "\n".join(lines) + "\n"

    @property
    def digest(self) -> str:
        """sha256 of the rendered manifest: the input's digest."""
        return hashlib.sha256(self.render().encode()).hexdigest()

    @classmethod
    def parse(cls, text: str) -> DigestManifest:
        """Parse a rendered manifest; ValueError unless it is canonical."""
        if not text.endswith("\n"):
            raise ValueError("digest manifest must end with a newline")
        header, *lines = text[:-1].split("\n")
        if header != MANIFEST_HEADER:
            raise ValueError(f"digest manifest must start with {MANIFEST_HEADER!r}")
        entries = []
        for number, line in enumerate(lines, start=2):
            parts = line.split(" ", 2)
            if len(parts) != 3 or not parts[1].isdigit():
                raise ValueError(f"digest manifest line {number} is malformed")
            entries.append(ManifestEntry(parts[2], int(parts[1]), parts[0]))
        manifest = cls.build(entries)
        if manifest.render() != text:
            raise ValueError("digest manifest is not canonical (order or number format)")
        return manifest

    def verify(self, root: Path, *, exact: bool = True) -> list[str]:
        """Differences between the manifest and the files under `root` (empty: verified).

        With `exact`, files under `root` that the manifest does not list are differences too
        (use it for directories; not for a file set inside a larger volume).
        """
        problems = []
        for entry in self.entries:
            path = root / entry.path
            if not path.is_file():
                problems.append(f"{entry.path}: missing")
                continue
            actual = _entry(root, entry.path)
            if actual.size != entry.size:
                problems.append(f"{entry.path}: size {actual.size}, expected {entry.size}")
            elif actual.sha256 != entry.sha256:
                problems.append(f"{entry.path}: sha256 differs")
        if exact:
            listed = {e.path for e in self.entries}
            problems += [f"{rel}: not in the manifest" for rel in _walk(root) if rel not in listed]
        return problems


def digest_of_directory(root: Path, exclude: Iterable[str] = ()) -> str:
    """The digest of every file under `root` (what model.sha256 holds for a model dir)."""
    return DigestManifest.for_directory(root, exclude).digest


def digest_of_files(root: Path, files: Iterable[str]) -> str:
    """The digest of a file set (what dataset.sha256 holds for the train/validation files)."""
    return DigestManifest.for_files(root, files).digest


def _check_entry(entry: ManifestEntry) -> None:
    if len(entry.sha256) != 64 or not set(entry.sha256) <= _HEX:
        raise ValueError(f"{entry.path}: sha256 must be 64 lowercase hex digits")
    if entry.size < 0:
        raise ValueError(f"{entry.path}: size must be >= 0")
    _normalise(entry.path)


def _normalise(rel: str) -> str:
    if not rel or "\n" in rel or "\\" in rel or "\x00" in rel:
        raise ValueError(f"unusable path in digest manifest: {rel!r}")
    pure = PurePosixPath(rel)
    if pure.is_absolute() or any(part in ("..", ".") for part in rel.split("/")):
        raise ValueError(f"path must be relative and stay inside the root: {rel!r}")
    if pure.as_posix() != rel:
        raise ValueError(f"path must be normalised: {rel!r}")
    return rel


def _walk(root: Path) -> list[str]:
    if not root.is_dir():
        raise FileNotFoundError(f"not a directory: {root}")
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        for name in dirnames:
            if (here / name).is_symlink():
                raise ValueError(f"symbolic link to a directory: {here / name}")
        for name in filenames:
            path = here / name
            if path.is_file():  # follows file symlinks; skips sockets, fifos, dangling links
                found.append(path.relative_to(root).as_posix())
    return found


def _entry(root: Path, rel: str) -> ManifestEntry:
    path = root / rel
    with path.open("rb") as fh:
        sha = hashlib.file_digest(fh, "sha256").hexdigest()
    return ManifestEntry(rel, path.stat().st_size, sha)
