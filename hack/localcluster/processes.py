"""Starting, health-checking and stopping the control plane's processes.

Every process runs in its own session (so a stop reaches its whole process group) and, on Linux,
receives SIGKILL if the Python process that started it dies — a crashed or killed test run never
leaves etcd or an API server behind. (Linux ties that signal to the *thread* that started the
process: start long-lived processes from long-lived threads.)
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def tree_rss(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants, in bytes, from ``/proc``."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # The command name may hold spaces and parentheses: fields follow the last ')'.
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo.extend(children.get(current, []))
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int((Path("/proc") / str(current) / "statm").read_text().split()[1])
    return total * os.sysconf("SC_PAGE_SIZE")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time ``pid`` has used so far, in seconds (0 once it is gone)."""
    try:
        fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # utime and stime: the 14th and 15th fields, the 12th and 13th after the command name.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port that was free a moment ago, for a process about to listen on it; never
    the same one twice in this process. Taken below the kernel's ephemeral range: the kernel
    hands ports there to port-0 binds and outgoing connections, and could give one away between
    this check and the server's bind (a component fails with "address already in use")."""
    ephemeral_low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    lowest = max(1024, ephemeral_low // 2)  # never a privileged port
    for _ in range(100):
        port = random.randrange(lowest, max(ephemeral_low, lowest + 1))
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free loopback port below {ephemeral_low}")


class StartupError(RuntimeError):
    pass


@dataclass
class Managed:
    name: str
    popen: subprocess.Popen
    log: Path

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class Supervisor:
    """Owns the processes of one cluster; stops them in reverse start order."""

    log_dir: Path
    processes: list[Managed] = field(default_factory=list)

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Managed:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        managed = Managed(name, popen, log)
        self.processes.append(managed)
        return managed

    def wait_until(
        self, managed: Managed, ready: Callable[[], bool], what: str, timeout: float = 60.0
    ) -> None:
        """Poll ``ready`` until true; fail early, with the log's tail, if the process exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if managed.popen.poll() is not None:
                raise StartupError(
                    f"{managed.name} exited with {managed.popen.returncode} before {what}; "
                    f"log {managed.log}:\n{managed.tail()}"
                )
            with contextlib.suppress(Exception):
                if ready():
                    return
            time.sleep(0.2)
        raise StartupError(
            f"{managed.name} not {what} after {timeout:.0f}s; log {managed.log}:\n{managed.tail()}"
        )

    def stop_all(self, grace: float = 10.0) -> None:
        for managed in reversed(self.processes):
            _stop(managed.popen, grace)
        self.processes.clear()


def _stop(popen: subprocess.Popen, grace: float) -> None:
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(grace)
    # The group may hold children that outlive the leader.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(5)
