"""Running a process in a private mount namespace with a pod's mounts bind-mounted at their
``mountPath`` — how the harness gives local processes the filesystem a container would see.

A ``Sandbox`` goes further, as a container runtime does: a UTS namespace with the pod's
hostname, the pod's own ``/etc/hosts``, a fresh tmpfs ``/dev/shm`` of the pod's size, and a
private ``/tmp`` (a directory of the pod's, bind-mounted over it). A pod without a sandbox gets a
private ``/tmp`` too when it mounts a volume there. Host paths the process still needs under
``/tmp`` (this virtualenv, when the checkout lives there) are bound into the private ``/tmp``
first, so replacing ``/tmp`` hides nothing they use.

A container with ``readOnlyRootFilesystem`` gets the root filesystem read-only in its namespace
(a per-mount flag: the host's stays writable), so only its mounts, its ``/tmp`` and ``/dev/shm``
take writes, as on a real node; what writes elsewhere fails here as it would there.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from .podspec import Mount

_TMP = Path("/tmp")


# The harness has no images: this checkout (the editable install's sources) and its virtualenv
# stand in for the image's filesystem, and must stay visible when either lives under /tmp.
IMAGE_PATHS = (Path(sys.prefix), Path(__file__).resolve().parents[2])
# The image stand-in's compile cache, shared by every pod on this machine and writable under a
# read-only root too: an image can carry such a cache warm (a warm-up at build time); see
# TORCHINDUCTOR_CACHE_DIR in ray_node.
INDUCTOR_CACHE = Path.home() / ".cache" / "grpo-operator" / "torchinductor"


@dataclass(frozen=True)
class Sandbox:
    """What a pod's container has of its own beyond its volumes."""

    hostname: str
    hosts_file: Path  # on this machine; becomes /etc/hosts
    shm_bytes: int  # the tmpfs at /dev/shm
    read_only_root: bool = False  # the container's securityContext.readOnlyRootFilesystem



class Mountpoints:
    """Creates the mount target paths on this machine and removes the ones it created, once no
    namespace can still be using them (they are shared by every namespace): a target that is a
    mount point in any live namespace stays. Removing it would unmount it there (since Linux
    3.18, rmdir of a mount point in another namespace detaches that mount), and another local
    cluster on this machine (the other test lane) may have a pod running on the same target: a
    fresh-clone run lost a pod's /model that way when the other lane's cluster stopped."""

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
        in_use = mount_points_in_use()
        kept = [path for path in created  # a target in use, and the directories above it
                if any(Path(point).is_relative_to(path) for point in in_use)]
        for path in sorted(set(created) - set(kept), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                path.unlink() if path.is_file() else path.rmdir()
        with self._lock:  # for a later call, once their namespaces are gone
            self._created.extend(kept)


@dataclass(frozen=True)
class MountEntry:
    """One line of a ``/proc/PID/mountinfo``."""

    device: str  # major:minor of its filesystem
    root: str  # the directory of that filesystem mounted here
    point: str  # where, in its namespace


def mountinfo(pid: int | str = "self") -> list[MountEntry]:
    """The mounts of the process's mount namespace."""
    def unescape(field: str) -> str:  # space, tab, newline and backslash are octal-escaped
        return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)

    return [MountEntry(fields[2], unescape(fields[3]), unescape(fields[4]))
            for fields in (line.split() for line in
                           Path(f"/proc/{pid}/mountinfo").read_text().splitlines())]


def live_mount_namespaces() -> list[tuple[list[int], list[MountEntry]]]:
    """Every live mount namespace on this machine: its processes, and its mounts (read once,
    through one of them)."""
    members: dict[str, list[int]] = {}
    mounts: dict[str, list[MountEntry]] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
            namespace = os.readlink(proc / "ns" / "mnt")
            if namespace not in mounts:
                mounts[namespace] = mountinfo(proc.name)
            members.setdefault(namespace, []).append(int(proc.name))
    return [(members[namespace], mounts[namespace]) for namespace in mounts]


def mount_points_in_use() -> set[str]:
    """Every mount point of every live mount namespace on this machine."""
    return {entry.point for _, entries in live_mount_namespaces() for entry in entries}


def _bind(lines: list[str], source: Path | str, target: str, read_only: bool) -> None:
    src, dst = shlex.quote(str(source)), shlex.quote(target)
    lines.append(f"mount --bind {src} {dst}")
    if read_only:
        lines.append(f"mount -o remount,bind,ro {dst}")


def under_tmp(path: Path | str) -> bool:
    return Path(path).is_relative_to(_TMP)


def wrap(argv: list[str], mounts: list[Mount], workdir: str = "/", *,
         sandbox: Sandbox | None = None, private_tmp: Path | None = None,
         read_only_root: bool = False,
         image_paths: tuple[Path, ...] = IMAGE_PATHS) -> list[str]:
    """``argv`` run in a new mount namespace after bind-mounting ``mounts`` (read-only where
    asked). The targets must exist (``Mountpoints.ensure``). ``exec`` keeps the pid. With a
    ``sandbox``, also its hostname, hosts file and /dev/shm. ``private_tmp`` (required with a
    sandbox) becomes /tmp, with ``image_paths`` under /tmp kept visible (read-only) in it.
    ``read_only_root``: the root filesystem read-only, the image's cache excepted."""
    lines = ["set -e"]
    if sandbox is not None:
        if private_tmp is None:
            raise ValueError("a sandbox needs a private /tmp directory")
        lines.append(f"hostname {shlex.quote(sandbox.hostname)}")
        lines.append(f"mount -t tmpfs -o size={sandbox.shm_bytes},mode=1777 tmpfs /dev/shm")
        _bind(lines, sandbox.hosts_file, "/etc/hosts", read_only=True)
    if private_tmp is not None:
        inside = [m for m in mounts if under_tmp(m.target)]
        if inside:
            raise ValueError(f"volume mounts under a private /tmp are not supported: "
                             f"{[m.target for m in inside]}")
        # Image paths under /tmp stay visible in the pod's /tmp at the same place (a path
        # inside another kept one comes with it).
        kept = [p for p in image_paths if under_tmp(p)]
        for keep in sorted(p for p in kept if not any(p != q and p.is_relative_to(q)
                                                      for q in kept)):
            target = private_tmp / keep.relative_to(_TMP)
            target.mkdir(parents=True, exist_ok=True)
            _bind(lines, keep, str(target), read_only=True)
    for m in mounts:
        _bind(lines, m.source, m.target, m.read_only)
    if private_tmp is not None:
        lines.append(f"mount --rbind {shlex.quote(str(private_tmp))} /tmp")
    if read_only_root:
        INDUCTOR_CACHE.mkdir(parents=True, exist_ok=True)
        _bind(lines, INDUCTOR_CACHE, str(INDUCTOR_CACHE), read_only=False)
        lines.append("mount -o remount,bind,ro /")
    lines += [f"cd {shlex.quote(workdir)}", 'exec "$@"']
    namespaces = ["--mount", "--uts"] if sandbox is not None else ["--mount"]
    return ["unshare", *namespaces, "--propagation", "private", "--",
            "sh", "-c", "\n".join(lines), "pod-entrypoint", *argv]
