"""Real local Ray nodes (``ray start --block``): a head, and workers that join it.

Token authentication is on, with a token generated here (or the cluster's) written to the
node's own directory (``RAY_AUTH_MODE=token`` + ``RAY_AUTH_TOKEN_PATH``; Ray 2.60's ``ray
start`` reads the token from that file and never creates ``~/.ray/auth_token`` when it is given
one). Every port is chosen here, so several nodes can run side by side on different loopback
addresses (127.0.0.1, 127.0.1.2, ...; Linux routes all of 127/8 to ``lo``).

A node started with a ``Sandbox`` runs like a pod's container: in private mount and UTS
namespaces with its own hostname, its own ``/etc/hosts``, its own tmpfs ``/dev/shm`` and its
own ``/tmp`` (see ``mountns``); Ray's temp dir and the token then live in that ``/tmp``.

Lifetime: the node runs in its own session; if the process that started it dies, the node gets
SIGTERM (``PR_SET_PDEATHSIG``) and tears itself down. ``stop()`` asks ``ray start`` to shut its
node down, then kills what is left: its process group, every process that was in its process
tree when the stop began (job entrypoints run in sessions of their own and outlive a killed
group), and every process still carrying this node's marker in its environment. ``ray stop`` is
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
_MARKER_ENV = "GRPO_LOCAL_RAY_NODE"
# Env a node must not inherit: a token or address of some other cluster would win over ours.
_SCRUBBED_ENV = ("RAY_AUTH_TOKEN", "RAY_ADDRESS", "RAY_NODE_IP_ADDRESS")
# Ray refuses an object store below 75 MiB.
_MIN_OBJECT_STORE = 80 * 1024**2

# Run by the node's launcher before exec'ing `ray start`: die-with-parent as SIGTERM (so that
# `ray start --block` shuts its node down cleanly instead of orphaning its agents), and drop
# the scrubbed variables (Supervisor.start only adds to the environment).
_PRELUDE = """
import ctypes, os, signal, sys
ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
if os.getppid() != int(sys.argv[1]):
    sys.exit("ray node launcher: parent already gone")
for name in sys.argv[2].split(","):
    os.environ.pop(name, None)
os.execv(sys.argv[3], sys.argv[3:])
"""


class LeftoverProcessesError(RuntimeError):
    """Some of the node's processes survived stop()."""


@dataclass(frozen=True)
class NodeResources:
    """What a node offers Ray's scheduler (``ray start --num-cpus ...``)."""

    num_cpus: float = 1
    num_gpus: float = 0
    memory_bytes: int | None = None
    custom: dict[str, float] = field(default_factory=dict)
    object_store_bytes: int = 256 * 1024**2

    def flags(self) -> list[str]:
        flags = [f"--num-cpus={_number(self.num_cpus)}", f"--num-gpus={_number(self.num_gpus)}",
                 f"--object-store-memory={max(self.object_store_bytes, _MIN_OBJECT_STORE)}"]
        if self.memory_bytes is not None:
            flags.append(f"--memory={self.memory_bytes}")
        if self.custom:
            flags.append(f"--resources={json.dumps(self.custom, sort_keys=True)}")
        return flags


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


@dataclass
class RayNode:
    """A running local Ray node. Start with ``RayNode.head()`` or ``RayNode.worker()``; use as
    a context manager."""

    ip: str
    gcs_address: str  # the cluster's GCS, host:port (a worker's is its head's)
    root: Path  # on this machine
    token_file: Path  # on this machine
    env: dict[str, str]
    supervisor: Supervisor
    process: Managed
    dashboard_port: int | None = None  # heads only
    sandboxed: bool = False
    _stopped: bool = field(default=False, repr=False)

    @property
    def is_head(self) -> bool:
        return self.dashboard_port is not None

    @property
    def address(self) -> str:
        """The Jobs API (dashboard) address of a head, e.g. ``http://127.0.0.1:8265``."""
        if self.dashboard_port is None:
            raise ValueError("a worker node has no Jobs API")
        return f"http://{self.ip}:{self.dashboard_port}"

    @property
    def temp_dir(self) -> Path:
        """Ray's temp dir on this machine (sessions, logs, sockets)."""
        return self.root / "tmp" / "ray" if self.sandboxed else self.root / "t"

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
    def head(
        cls,
        *,
        ip: str = "127.0.0.1",
        env: dict[str, str] | None = None,
        resources: NodeResources | None = None,
        job_stop_wait_s: int = DEFAULT_JOB_STOP_WAIT_S,
        timeout: float = 120.0,
        root: Path | None = None,
        token: str | None = None,
        mounts: list[Mount] | None = None,
        sandbox: mountns.Sandbox | None = None,
        dashboard_port: int | None = None,
        wait: bool = True,
    ) -> RayNode:
        """Start a head on ``ip``; unless ``wait`` is false, wait (bounded by ``timeout``)
        until its Jobs API answers (``ready()``).

        ``env`` is added to the node's environment (job entrypoints inherit it). ``root`` holds
        the token, the log and Ray's temp dir; by default a fresh short directory under /tmp
        (Ray's Unix socket paths live under it and are limited to 107 bytes), removed by
        ``stop()``. ``token`` is the cluster's auth token (default: a fresh one). ``mounts``
        run the node — and every Ray process and job under it — in a private mount namespace
        with those bind mounts (their targets must exist: ``mountns.Mountpoints.ensure``);
        ``sandbox`` adds its own hostname, /etc/hosts, /dev/shm and /tmp.
        ``dashboard_port`` insists on that Jobs API port instead of falling back to a free one.
        """
        ports, worker_low = _reserve_ports(ip, 9, taken={dashboard_port} - {None})
        if dashboard_port is None:
            dashboard_port = DASHBOARD_PORT if port_free(ip, DASHBOARD_PORT) else ports.pop()
        gcs, client_server, *node_ports = ports
        head_flags = [
            "--head",
            f"--port={gcs}",
            "--include-dashboard=true",
            f"--dashboard-host={ip}",
            f"--dashboard-port={dashboard_port}",
            f"--ray-client-server-port={client_server}",
        ]
        env = {"RAY_JOB_STOP_WAIT_TIME_S": str(job_stop_wait_s), **(env or {})}
        node = cls._launch(ip, f"{ip}:{gcs}", head_flags, node_ports, dashboard_port,
                           worker_low, env=env, resources=resources or NodeResources(),
                           root=root, token=token, mounts=mounts, sandbox=sandbox)
        if wait:
            node.wait_ready(timeout)
        return node

    @classmethod
    def worker(
        cls,
        gcs_address: str,
        token: str,
        *,
        ip: str,
        env: dict[str, str] | None = None,
        resources: NodeResources | None = None,
        root: Path | None = None,
        mounts: list[Mount] | None = None,
        sandbox: mountns.Sandbox | None = None,
    ) -> RayNode:
        """Start a worker that joins the cluster whose GCS is ``gcs_address`` (it does not
        wait: ``ready()`` says when the node has joined)."""
        ports, worker_low = _reserve_ports(ip, 7)
        return cls._launch(ip, gcs_address, [f"--address={gcs_address}"], ports, None, worker_low,
                           env=env or {}, resources=resources or NodeResources(), root=root,
                           token=token, mounts=mounts, sandbox=sandbox)

    @classmethod
    def _launch(cls, ip, gcs_address, role_flags, ports, dashboard_port, worker_low, *, env,
                resources, root, token, mounts, sandbox) -> RayNode:
        root = Path(root) if root else Path(tempfile.mkdtemp(prefix="rn-", dir="/tmp"))
        root.mkdir(parents=True, exist_ok=True)
        # Paths as the node sees them: in a sandbox, its own /tmp is <root>/tmp here.
        if sandbox is not None:
            (root / "tmp").mkdir(exist_ok=True)
            token_file, inner_token, inner_temp = (root / "tmp" / "ray-auth-token",
                                                   "/tmp/ray-auth-token", "/tmp/ray")
        else:
            token_file = root / "auth_token"
            inner_token, inner_temp = str(token_file), str(root / "t")
        token_file.write_text(token or secrets.token_hex(32))
        token_file.chmod(0o600)
        agent_listen, agent_grpc, runtime_env_agent, metrics, node_manager, object_manager, \
            *_ = ports
        node_env = {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": inner_token,
            # Stop at once on SIGTERM instead of draining running jobs for up to 30 s.
            "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
            "RAY_USAGE_STATS_ENABLED": "0",
            # The image stand-in's compile cache: vLLM compiles the model at the engine's start
            # and its sampler's kernel at the first generate, C++ compiling that a fresh /tmp
            # pays in full (the sampler's alone ~15 s). A node's /tmp is its own, so without
            # this every new Ray pod of every test would compile them again; an image can
            # carry the cache the same way (a warm-up at build time).
            "TORCHINDUCTOR_CACHE_DIR": str(mountns.INDUCTOR_CACHE),
            # Job entrypoints and actors find this virtualenv's `python` and `ray` first.
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            **env,
            _MARKER_ENV: str(root),
        }
        argv = [
            str(Path(sys.executable).parent / "ray"), "start", "--block",
            *role_flags,
            f"--node-ip-address={ip}",
            f"--dashboard-agent-listen-port={agent_listen}",
            f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--runtime-env-agent-port={runtime_env_agent}",
            f"--metrics-export-port={metrics}",
            f"--node-manager-port={node_manager}",
            f"--object-manager-port={object_manager}",
            f"--min-worker-port={worker_low}",
            f"--max-worker-port={worker_low + _WORKER_PORTS - 1}",
            *resources.flags(),
            f"--temp-dir={inner_temp}",
            "--disable-usage-stats",
            "--log-style=record",
        ]
        launcher = [
            sys.executable, "-c", _PRELUDE, str(os.getpid()), ",".join(_SCRUBBED_ENV), *argv,
        ]
        if mounts or sandbox:
            launcher = mountns.wrap(launcher, mounts or [], sandbox=sandbox,
                                    private_tmp=root / "tmp" if sandbox else None,
                                    read_only_root=sandbox is not None and sandbox.read_only_root)
        supervisor = Supervisor(root / "log" if sandbox else root)
        process = supervisor.start("ray-node", launcher, env=node_env)
        return cls(ip, gcs_address, root, token_file, node_env, supervisor, process,
                   dashboard_port, sandbox is not None)

    def wait_ready(self, timeout: float) -> None:
        """Wait until ``ready()``; fails early, with the log, if the node exits (and stops
        what it started)."""
        try:
            self.supervisor.wait_until(self.process, self.ready, "ready", timeout=timeout)
        except BaseException:
            self.stop(remove=False)
            raise

    def shm(self) -> tuple[int, list[str]]:
        """(bytes used, file names) of the node's /dev/shm as its processes see it (through
        ``/proc/<pid>/root``, which resolves in the node's mount namespace)."""
        shm = Path("/proc", str(self.process.popen.pid), "root", "dev", "shm")
        stat = os.statvfs(shm)
        return (stat.f_blocks - stat.f_bfree) * stat.f_frsize, sorted(os.listdir(shm))

    def exited(self) -> int | None:
        """``ray start``'s exit code once it has exited (None while it runs)."""
        return self.process.popen.poll()

    def ready(self) -> bool:
        """A head: its Jobs API answers. A worker: its head's GCS lists it as alive."""
        if self.is_head:
            return self._jobs_api_ready()
        return self._joined()

    def _joined(self) -> bool:
        # The raylet logs this line from its GCS registration's callback. (session_latest is
        # a link relative to the node's own /tmp: glob the session itself.)
        return any(" started. Raylet consists of" in p.read_text(errors="replace")
                   for p in self.temp_dir.glob("session_2*/logs/raylet.out"))

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
        """Live processes of this node (pid -> command line): the ``ray start`` process tree,
        its process group, and anything carrying this node's environment marker."""
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
        """Shut the node down and make sure none of its processes remain (bounded).

        Raises LeftoverProcessesError if some process could not be killed. Removes the node's
        directory unless ``remove`` is false.
        """
        if self._stopped:
            return
        self._stopped = True
        # (A process gone between the listing and its start time is no process to wait for.)
        snapshot = {pid: t for pid in self.processes() if (t := _start_time(pid)) is not None}
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
                    "processes of the Ray node survived stop(): " + "; ".join(described)
                )
            for pid in alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> RayNode:
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


def _reserve_ports(ip: str, count: int, taken: set[int] = frozenset()) -> tuple[list[int], int]:
    """``count`` free ports for a node's components and the lowest of ``_WORKER_PORTS`` free
    consecutive ports, none of them in ``taken`` or among the others (Ray refuses to start when
    its worker range holds a port of its own components)."""
    chosen: list[int] = []
    low, high = _PORT_RANGE
    for _ in range(count * 50):
        port = random.randrange(low, high)
        if port not in chosen and port not in taken and port_free(ip, port):
            chosen.append(port)
            if len(chosen) == count:
                return chosen, _free_block(ip, _WORKER_PORTS, exclude={*chosen, *taken})
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
