"""A local Kubernetes control plane started as processes, the way envtest does it, plus the
parts that make it behave like a GPU cluster: kube-controller-manager, kube-scheduler, KWOK fake
nodes and the real KubeRay operator.

    with LocalCluster.start() as cluster:
        cluster.kubectl("get", "nodes")

Everything lives under one root directory (PKI, etcd data, logs, kubeconfigs) that is removed
on stop unless the caller passed its own ``root``.

The harness plays the kubelet of two kinds of pods KWOK leaves alone: driver pods
(``driver_runner``: the trainer's driver as a local process) and the Ray pods of the operator's
RayClusters (``ray_pods``: each pod its own Ray node, head or worker).

Options for benchmarks: ``gpu_nodes`` and ``cpu_nodes`` (the pools' sizes),
``run_driver_pods=False`` (driver pods stay Pending and KWOK fakes Ray pods, instead of each run
training on real Ray nodes) and ``keep_audit_log`` (the API server writes ``audit_log``, to
count requests by client).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import audit, components, kubeconfig, mountns, nodes, pki
from .binaries import Toolset, ensure_built
from .driver_runner import DriverRunner
from .processes import Supervisor
from .ray_pods import RayPods


class KubectlError(subprocess.CalledProcessError):
    """A failed kubectl, its stderr in the message (a test failure then says why)."""

    def __str__(self) -> str:
        return f"{super().__str__()}: {(self.stderr or '').strip()[-2000:]}"


@dataclass
class LocalCluster:
    root: Path
    tools: Toolset
    supervisor: Supervisor
    pki: pki.Pki
    server: str = ""
    kubeconfig: Path = field(default=Path())
    owns_root: bool = True
    gpu_nodes: int = 2
    cpu_nodes: int = 1
    run_driver_pods: bool = True
    keep_audit_log: bool = False
    driver_runner: DriverRunner | None = None
    ray_pods: RayPods | None = None
    _admin: object = None
    # Seconds each start-up phase took, for the README's numbers and `localcluster up`.
    timings: dict[str, float] = field(default_factory=dict)

    @classmethod
    def start(cls, root: Path | None = None, *, tools: Toolset | None = None,
              gpu_nodes: int = 2, cpu_nodes: int = 1, run_driver_pods: bool = True,
              keep_audit_log: bool = False) -> LocalCluster:
        owns_root = root is None
        root = Path(tempfile.mkdtemp(prefix="grpo-localcluster-")) if root is None else root
        root.mkdir(parents=True, exist_ok=True)
        cluster = cls(
            root=root,
            tools=tools or ensure_built(),
            supervisor=Supervisor(root / "logs"),
            pki=pki.generate(root / "pki"),
            owns_root=owns_root,
            gpu_nodes=gpu_nodes,
            cpu_nodes=cpu_nodes,
            run_driver_pods=run_driver_pods,
            keep_audit_log=keep_audit_log,
        )
        try:
            cluster._start_all()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _start_all(self) -> None:
        ctx = components.Context(self.tools, self.supervisor, self.pki, self.root)
        with self._phase("etcd"):
            etcd_url = components.start_etcd(ctx)
        with self._phase("kube-apiserver"):
            audit_flags = audit.apiserver_flags(self.root / "audit") if self.keep_audit_log else []
            self.server, self.kubeconfig = components.start_apiserver(ctx, etcd_url, audit_flags)
        with self._phase("kube-controller-manager"):
            components.start_controller_manager(ctx, self.server)
        with self._phase("kube-scheduler"):
            components.start_scheduler(ctx, self.server)
        with self._phase("kwok+nodes"):
            # KWOK leaves the pods the harness plays alone (drivers, and Ray pods if run).
            components.start_kwok(ctx, self.server, components.PLAYED_SELECTOR
                                  if self.run_driver_pods else components.DRIVER_SELECTOR)
            pools = nodes.default_nodes(self.gpu_nodes, self.cpu_nodes)
            self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(pools))
            self.kubectl("wait", "--for=condition=Ready", "node", "--all", "--timeout=60s")
        with self._phase("kuberay-operator"):
            for crd in self.tools.kuberay_crds:
                self.install_crd(crd)
            components.start_kuberay(ctx, self.server)
        self._admin = self.api_client()
        self.mountpoints = mountns.Mountpoints()
        if self.run_driver_pods:
            self.ray_pods = RayPods(self._admin, self.root, mountpoints=self.mountpoints)
            self.ray_pods.start()
        self.driver_runner = DriverRunner(
            self._admin,
            self.root,
            selector=components.DRIVER_SELECTOR,
            apiserver_port=int(self.server.rsplit(":", 1)[1]),
            mountpoints=self.mountpoints,
            host_aliases=self.ray_pods.host_aliases if self.ray_pods is not None else None,
            run_pods=self.run_driver_pods,
        )
        self.driver_runner.start()
        self.timings["total"] = round(sum(self.timings.values()), 2)

    @contextlib.contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        yield
        self.timings[name] = round(time.monotonic() - started, 2)

    def stop(self) -> None:
        if self.driver_runner is not None:
            self.driver_runner.stop()
            if self.ray_pods is not None:
                self.ray_pods.stop()
            self.mountpoints.remove_created()
            self._admin.close()
        self.supervisor.stop_all()
        if self.owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- clients ---------------------------------------------------------------------------

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run the pinned kubectl as the admin. Raises with stderr when ``check`` and it fails."""
        proc = subprocess.run(
            [self.tools.bin("kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise KubectlError(proc.returncode, proc.args, proc.stdout, proc.stderr)
        return proc

    def install_crd(self, path: Path, timeout: float = 60) -> None:
        """Server-side apply a CRD file (large CRDs exceed a client-side apply's annotation
        limit) and wait until it is Established and its kind is listed. Polls instead of
        `kubectl wait`, which fails outright while a new CRD has no conditions yet; an
        Established kind's lists are still refused (429, "storage is (re)initializing") until
        the API server's watch cache for it has started, a second or more here, which a
        controller started at once spends retrying."""
        applied = self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path),
                               "-o", "name").stdout.split()
        deadline = time.monotonic() + timeout

        def until(what: str, done: Callable[[subprocess.CompletedProcess[str]], bool],
                  *args: str) -> None:
            while not done(self.kubectl(*args, check=False)):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{what} after {timeout:.0f}s")
                time.sleep(0.2)

        for name in applied:
            until(f"{name} not Established", lambda got: got.stdout == "True", "get", name, "-o",
                  "jsonpath={.status.conditions[?(@.type=='Established')].status}")
            group, plural, version = self.kubectl(
                "get", name, "-o", "jsonpath={.spec.group} {.spec.names.plural} "
                "{.spec.versions[?(@.served==true)].name}").stdout.split()[:3]
            until(f"{plural}.{group} not listed", lambda got: got.returncode == 0,
                  "get", "--raw", f"/apis/{group}/{version}/{plural}")

    def api_client(self):
        """A ``kubernetes.client.ApiClient`` for the admin."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def write_kubeconfig(self, path: Path, *, user: str, token: str) -> Path:
        """A kubeconfig for ``user`` authenticating with a bearer token."""
        return kubeconfig.write(path, self.server, self.pki.ca.cert, user=user, token=token)

    @property
    def audit_log(self) -> Path | None:
        """The API server's audit log (JSON lines; see ``localcluster.audit``), if kept."""
        return self.root / "audit" / audit.LOG_NAME if self.keep_audit_log else None

    @property
    def bin_dir(self) -> Path:
        return self.tools.bin_dir

    @staticmethod
    def tools_bin(name: str) -> str:
        return ensure_built().bin(name)
