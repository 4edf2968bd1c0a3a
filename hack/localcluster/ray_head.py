"""A real local Ray head (``ray start --head --block``) for tests and the demo.

Token authentication is on, with a token generated here and written to the head's own directory
(``RAY_AUTH_MODE=token`` + ``RAY_AUTH_TOKEN_PATH``; Ray 2.60's ``ray start`` reads the token
from that file and never creates ``~/.ray/auth_token`` when it is given one). Every port is
chosen here, so several heads can run side by side on different loopback addresses
(127.0.0.1, 127.0.0.2, ...; Linux routes all of 127/8 to ``lo``).

Lifetime: the head runs in its own session; if the process that started it dies, the head gets
SIGTERM (``PR_SET_PDEATHSIG``) and tears itself down. ``stop()`` asks ``ray start`` to shut its
node down, then kills what is left: its process group, every process that was in its process
tree when the stop began (job entrypoints run in sessions of their own and outlive a killed
group), and every process still carrying this head's marker in its environment. ``ray stop`` is
not used: it stops every Ray node on the machine, not just this one.

Ray quirk: a node IP of exactly 127.0.0.1 is replaced by the machine's outbound address
(``services.resolve_ip_for_localhost``); other 127.x.y.z addresses are used as given. The
dashboard (the Jobs API) is bound to the given address either way.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from . import mountns
from .podspec import Mount
from .processes import Managed, StartupError, Supervisor

DASHBOARD_PORT = 8265
# Ray's stop wait for a job's entrypoint (SIGTERM, then SIGKILL after this many seconds).
DEFAULT_JOB_STOP_WAIT_S = 30
# Ports are taken below the kernel's ephemeral range (32768-60999 by default), so neither a
# port-0 bind nor an outgoing connection takes one of them between choice and use.
_PORT_RANGE = (20000, 32000)
_WORKER_PORTS = 64
_MARKER_ENV = "GRPO_LOCAL_RAY_HEAD"
# Env the head must not inherit: a token or address of some other cluster would win over ours.
_SCRUBBED_ENV = ("RAY_AUTH_TOKEN", "RAY_ADDRESS", "RAY_NODE_IP_ADDRESS")

# Run by the head's launcher before exec'ing `ray start`: die-with-parent as SIGTERM (so that
# `ray start --block` shuts its node down cleanly instead of orphaning its agents), and drop
# the scrubbed variables (Supervisor.start only adds to the environment).
_PRELUDE = """
import ctypes, os, signal, sys
ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
if os.getppid() != int(sys.argv[1]):
    sys.exit("ray head launcher: parent already gone")
for name in sys.argv[2].split(","):
    os.environ.pop(name, None)
os.execv(sys.argv[3], sys.argv[3:])
"""


class LeftoverProcessesError(RuntimeError):
    """Some of the head's processes survived stop()."""


@dataclass
class RayHead:
    """A running local Ray head. Create with `RayHead.start()`; use as a context manager."""

    ip: str
    dashboard_port: int
    gcs_port: int
    root: Path
    token_file: Path
    env: dict[str, str]
    supervisor: Supervisor
    process: Managed
    _stopped: bool = field(default=False, repr=False)

    @property
    def address(self) -> str:
        """The Jobs API (dashboard) address, e.g. ``http://127.0.0.1:8265``."""
        return f"http://{self.ip}:{self.dashboard_port}"

    @property
    def gcs_address(self) -> str:
        return f"{self.ip}:{self.gcs_port}"

    @property
    def temp_dir(self) -> Path:
        """Ray's ``--temp-dir`` (sessions, logs, sockets)."""
        return self.root / "t"

    @property
    def log(self) -> Path:
        """Output of ``ray start``."""
        return self.process.log

    @property
    def token(self) -> str:
        return self.token_file.read_text().strip()

    def client_env(self) -> dict[str, str]:
        """Environment for a Ray client of this head (``ray job ...``, the driver)."""
        return {
            "RAY_ADDRESS": self.address,
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(self.token_file),
        }

    @classmethod
    def start(
        cls,
        *,
        ip: str = "127.0.0.1",
        env: dict[str, str] | None = None,
        num_cpus: int = 1,
        object_store_bytes: int = 256 * 1024**2,
        job_stop_wait_s: int = DEFAULT_JOB_STOP_WAIT_S,
        timeout: float = 120.0,
        root: Path | None = None,
        token: str | None = None,
        mounts: list[Mount] | None = None,
        dashboard_port: int | None = None,
    ) -> RayHead:
        """Start a head on ``ip`` and wait (bounded by ``timeout``) until its Jobs API answers.

        ``env`` is added to the head's environment (job entrypoints inherit it). ``root`` holds
        the token, the log and Ray's temp dir; by default a fresh short directory under /tmp
        (Ray's Unix socket paths live under it and are limited to 107 bytes), removed by
        ``stop()``. ``token`` is the cluster's auth token (default: a fresh one). ``mounts``
        run the head — and every Ray process and job under it — in a private mount namespace
        with those bind mounts (their targets must exist: ``mountns.Mountpoints.ensure``).
        ``dashboard_port`` insists on that Jobs API port instead of falling back to a free one.
        """
        root = Path(root) if root else Path(tempfile.mkdtemp(prefix="rh-", dir="/tmp"))
        root.mkdir(parents=True, exist_ok=True)
        token_file = root / "auth_token"
        token_file.write_text(token or secrets.token_hex(32))
        token_file.chmod(0o600)
        ports = _reserve_ports(ip, 9)
        if dashboard_port is not None:
            dashboard = dashboard_port  # a Service port that clients already know
        else:
            dashboard = DASHBOARD_PORT if port_free(ip, DASHBOARD_PORT) else ports.pop()
        worker_low = _free_block(ip, _WORKER_PORTS, exclude=set(ports) | {dashboard})
        head_env = {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(token_file),
            "RAY_JOB_STOP_WAIT_TIME_S": str(job_stop_wait_s),
            # Stop at once on SIGTERM instead of draining running jobs for up to 30 s.
            "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
            "RAY_USAGE_STATS_ENABLED": "0",
            # Job entrypoints find this virtualenv's `python` and `ray` first.
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            **(env or {}),
            _MARKER_ENV: str(root),
        }
        (gcs, agent_listen, agent_grpc, runtime_env_agent, metrics, client_server,
         node_manager, object_manager, *_) = ports
        argv = [
            str(Path(sys.executable).parent / "ray"), "start", "--head", "--block",
            f"--node-ip-address={ip}",
            f"--port={gcs}",
            "--include-dashboard=true",
            f"--dashboard-host={ip}",
            f"--dashboard-port={dashboard}",
            f"--dashboard-agent-listen-port={agent_listen}",
            f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--runtime-env-agent-port={runtime_env_agent}",
            f"--metrics-export-port={metrics}",
            f"--ray-client-server-port={client_server}",
            f"--node-manager-port={node_manager}",
            f"--object-manager-port={object_manager}",
            f"--min-worker-port={worker_low}",
            f"--max-worker-port={worker_low + _WORKER_PORTS - 1}",
            f"--num-cpus={num_cpus}",
            f"--object-store-memory={object_store_bytes}",
            f"--temp-dir={root / 't'}",
            "--disable-usage-stats",
            "--log-style=record",
        ]
        launcher = [
            sys.executable, "-c", _PRELUDE, str(os.getpid()), ",".join(_SCRUBBED_ENV), *argv,
        ]
        if mounts:
            launcher = mountns.wrap(launcher, mounts)
        supervisor = Supervisor(root)
        process = supervisor.start("ray-head", launcher, env=head_env)
        head = cls(ip, dashboard, gcs, root, token_file, head_env, supervisor, process)
        try:
            supervisor.wait_until(
                process, head._jobs_api_ready, "answering on the Jobs API", timeout=timeout
            )
        except BaseException:
            head.stop(remove=False)
            raise
        return head

    def _jobs_api_ready(self) -> bool:
        request = urllib.request.Request(
            f"{self.address}/api/jobs/", headers={"Authorization": f"Bearer {self.token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                json.load(response)
                return response.status == 200
        except urllib.error.HTTPError as e:
            if e.code in (401, 403):
                raise StartupError(f"the head refused its own token (HTTP {e.code})") from None
            return False
        except (OSError, ValueError):
            return False

    def processes(self) -> dict[int, str]:
        """Live processes of this head (pid -> command line): the ``ray start`` process tree,
        its process group, and anything carrying this head's environment marker."""
        leader = self.process.popen.pid
        table = _process_table()
        found = {pid for pid, info in table.items() if pid == leader or info.pgid == leader}
        frontier = set(found)
        while frontier:
            frontier = {pid for pid, info in table.items() if info.ppid in frontier} - found
            found |= frontier
        found |= {pid for pid in table if _has_marker(pid, str(self.root))}
        return {pid: table[pid].cmdline for pid in sorted(found)}

    def stop(self, grace: float = 20.0, *, remove: bool = True) -> None:
        """Shut the head down and make sure none of its processes remain (bounded).

        Raises LeftoverProcessesError if some process could not be killed. Removes the head's
        directory unless ``remove`` is false.
        """
        if self._stopped:
            return
        self._stopped = True
        snapshot = {pid: _start_time(pid) for pid in self.processes()}
        popen = self.process.popen
        if popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(popen.pid, signal.SIGTERM)
            with contextlib.suppress(Exception):
                popen.wait(grace)
        self.supervisor.stop_all(grace=5)
        deadline = time.monotonic() + 10
        while True:
            alive = {
                pid for pid, started in snapshot.items() if _start_time(pid) == started
            } | set(self.processes())
            alive.discard(os.getpid())
            if not alive:
                break
            if time.monotonic() > deadline:
                table = _process_table()
                described = (f"{pid} {table[pid].cmdline[:120]}" for pid in alive if pid in table)
                raise LeftoverProcessesError(
                    "processes of the Ray head survived stop(): " + "; ".join(described)
                )
            for pid in alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> RayHead:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# --- ports --------------------------------------------------------------------------------------


def port_free(ip: str, port: int) -> bool:
    """Bindable both on ``ip`` and on the wildcard address (Ray binds some ports on 0.0.0.0,
    and a wildcard bind fails if any address holds the port)."""
    for host in ("", ip):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def _reserve_ports(ip: str, count: int) -> list[int]:
    chosen: list[int] = []
    low, high = _PORT_RANGE
    for _ in range(count * 50):
        port = random.randrange(low, high)
        if port not in chosen and port_free(ip, port):
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise StartupError(f"could not find {count} free ports in {_PORT_RANGE} on {ip}")


def _free_block(ip: str, size: int, exclude: set[int]) -> int:
    low, high = _PORT_RANGE
    for _ in range(50):
        base = random.randrange(low, high - size)
        block = range(base, base + size)
        if not exclude.intersection(block) and all(port_free(ip, p) for p in block):
            return base
    raise StartupError(f"could not find {size} consecutive free ports in {_PORT_RANGE} on {ip}")


# --- /proc --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Proc:
    ppid: int
    pgid: int
    cmdline: str


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def _start_time(pid: int) -> int | None:
    fields = _stat_fields(pid)
    # Fields after the name start at field 3 (state); starttime is field 22. Zombies count as
    # gone: they hold no resources and vanish when their parent reaps them.
    if fields is None or fields[0] == "Z":
        return None
    return int(fields[19])


def _process_table() -> dict[int, _Proc]:
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        fields = _stat_fields(pid)
        if fields is None or fields[0] == "Z":
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        table[pid] = _Proc(ppid=int(fields[1]), pgid=int(fields[2]), cmdline=cmdline.strip())
    return table


def _has_marker(pid: int, root: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{_MARKER_ENV}={root}".encode() in environ.split(b"\0")
