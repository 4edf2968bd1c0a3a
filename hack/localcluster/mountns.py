"""Running a process in a private mount namespace with a pod's mounts bind-mounted at their
``mountPath`` — how the harness gives local processes the filesystem a container would see."""

from __future__ import annotations

import contextlib
import shlex
import threading
from pathlib import Path

from .podspec import Mount


class Mountpoints:
    """Creates the mount target paths on this machine and removes the ones it created, once no
    namespace can still be using them (they are shared by every namespace)."""

    def __init__(self) -> None:
        self._created: list[Path] = []
        self._lock = threading.Lock()

    def ensure(self, mounts: list[Mount]) -> None:
        for mount in mounts:
            is_file = mount.source.is_file()
            path = Path(mount.target)
            directory = path.parent if is_file else path
            missing = []
            probe = directory
            while not probe.exists():
                missing.append(probe)
                probe = probe.parent
            directory.mkdir(parents=True, exist_ok=True)
            if is_file and not path.exists():
                path.touch()
                missing.insert(0, path)
            with self._lock:
                self._created.extend(missing)

    def remove_created(self) -> None:
        with self._lock:
            created, self._created = self._created, []
        for path in sorted(set(created), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                path.unlink() if path.is_file() else path.rmdir()


def wrap(argv: list[str], mounts: list[Mount], workdir: str = "/") -> list[str]:
    """``argv`` run in a new mount namespace after bind-mounting ``mounts`` (read-only where
    asked). The targets must exist (``Mountpoints.ensure``). ``exec`` keeps the pid."""
    lines = ["set -e"]
    for m in mounts:
        src, dst = shlex.quote(str(m.source)), shlex.quote(m.target)
        lines.append(f"mount --bind {src} {dst}")
        if m.read_only:
            lines.append(f"mount -o remount,bind,ro {dst}")
    lines += [f"cd {shlex.quote(workdir)}", 'exec "$@"']
    return ["unshare", "--mount", "--propagation", "private", "--",
            "sh", "-c", "\n".join(lines), "pod-entrypoint", *argv]
