"""The harness's kubelet for driver pods (``pod_runner`` has what every pod shares).

Pods labelled ``grpo.dev/role=driver`` run the container's command as a real local process:

- in a private mount namespace (``unshare --mount``) where each volume is bind-mounted at its
  ``mountPath`` (read-only when the mount says so), the service-account token at
  ``/var/run/secrets/kubernetes.io/serviceaccount`` (from the TokenRequest API, bound to the
  pod, exactly as a kubelet asks for it) and a generated ``/etc/hosts``;
- with the container's environment, ``KUBERNETES_SERVICE_HOST/PORT`` pointing at the local API
  server (so in-cluster clients work unchanged) and the harness's Python first on ``PATH``
  (the harness has no images: the "image" is this virtualenv);
- at a loopback address of its own (its pod IP, see ``PodRunner``), where the driver serves
  its metrics on the container's declared port (``GRPO_DRIVER_METRICS_ADDRESS``: the harness
  has no network namespaces, so the driver is told the one address that is its pod's).

Host names: ``/etc/hosts`` carries the pod's ``hostAliases`` and whatever ``host_aliases``
returns for the pod — the hook by which a driver's RayCluster head Service resolves to the
local Ray node playing that cluster's head pod (``ray_pods``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from kubernetes import client

from . import mountns, podspec
from .pod_runner import PodProcess, PodRunner
from .processes import _die_with_parent

HostAliases = Callable[[dict], dict[str, list[str]]]


class DriverRunner(PodRunner):
    """Runs each driver pod as a local process (see the module docstring)."""

    name = "driver-runner"
    first_ip = "127.1.0.1"

    def __init__(
        self,
        api: client.ApiClient,
        root: Path,
        *,
        selector: str,
        apiserver_port: int,
        mountpoints: mountns.Mountpoints,
        host_aliases: HostAliases | None = None,
        run_pods: bool = True,
    ):
        super().__init__(api, root, selector=selector, run_pods=run_pods)
        self.apiserver_port = apiserver_port
        self.host_aliases = host_aliases or (lambda pod: {})
        self.mountpoints = mountpoints

    def new_pod(self, pod: dict) -> PodProcess:
        return _DriverPod(self, pod)

    def job_log(self, namespace: str, job: str) -> Path | None:
        """The log of the newest pod of Job ``job`` that the runner ran (None: none yet)."""
        pods = sorted((self.root / "pods" / namespace).glob(f"{job}-*/container.log"),
                      key=lambda p: p.stat().st_mtime)
        return pods[-1] if pods else None


class _DriverPod(PodProcess):
    runner: DriverRunner

    def __init__(self, runner: DriverRunner, pod: dict):
        super().__init__(runner, pod)
        self.popen: subprocess.Popen | None = None
        ports = [p["containerPort"] for p in self.container.get("ports") or []]
        self.pod_ip = runner.allocate_ip(ports[0] if ports else 0)

    def launch(self) -> None:
        argv, env, mount_list = self._prepare()
        mount_list, own_tmp = podspec.split_tmp(mount_list)
        log_path = self.runner.process_log(self.namespace, self.name)
        with log_path.open("ab") as out:
            self.popen = subprocess.Popen(
                mountns.wrap(argv, mount_list, self.container.get("workingDir") or "/",
                             private_tmp=own_tmp,
                             read_only_root=podspec.read_only_root(self.container)),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True, preexec_fn=_die_with_parent,
            )

    def exit_code(self) -> int | None:
        assert self.popen is not None
        return self.popen.poll()

    def signal(self, sig: int) -> None:
        assert self.popen is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)

    def _prepare(self) -> tuple[list[str], dict[str, str], list[podspec.Mount]]:
        spec = self.pod["spec"]
        if len(spec["containers"]) != 1 or spec.get("initContainers"):
            raise podspec.PodSpecError("the harness runs driver pods with exactly one container "
                                       "and no init containers")
        self.dir.mkdir(parents=True, exist_ok=True)
        volumes = podspec.materialise_volumes(self.pod, self.dir, self.runner.objects)
        mount_list = podspec.mounts(self.container, volumes)
        hosts = self.dir / "hosts"
        hosts.write_text(hosts_file(self.pod, self.runner.host_aliases(self.pod), self.pod_ip))
        mount_list.append(podspec.Mount(hosts, "/etc/hosts", read_only=True))
        self.runner.mountpoints.ensure(mount_list)
        container_env = podspec.environment(self.pod, self.container, self.runner.objects)
        env = {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.runner.apiserver_port),
            **podspec.process_environment(self.name, container_env),
            "GRPO_DRIVER_METRICS_ADDRESS": self.pod_ip,
        }
        return podspec.command(self.container, container_env), env, mount_list


def hosts_file(pod: dict, extra: dict[str, list[str]], ip: str = "127.0.0.1") -> str:
    """A pod's /etc/hosts: localhost, the pod's own name at its IP, its hostAliases, extras."""
    lines = ["127.0.0.1\tlocalhost", f"{ip}\t{pod['metadata']['name']}"]
    for alias in pod["spec"].get("hostAliases") or []:
        lines.append(f"{alias['ip']}\t{' '.join(alias.get('hostnames') or [])}")
    for address, names in extra.items():
        lines.append(f"{address}\t{' '.join(names)}")
    return "\n".join(lines) + "\n"
