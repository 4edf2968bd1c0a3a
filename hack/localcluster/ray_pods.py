"""The harness's kubelet for Ray pods: each pod of a RayCluster becomes its own Ray node.

KWOK would fake a RayCluster's pods, so nothing would answer a driver, and a single local
``ray start`` standing in for a whole cluster would let actors share one filesystem, one
``/dev/shm`` and one process tree. Pods labelled ``grpo.dev/role=ray-head`` or ``ray-worker``
(the operator labels its RayClusters' pods so) are played here instead, as pods of a real
cluster would run:

- the head pod is ``ray start --head``, each worker pod ``ray start --address=<head's GCS>``,
  each on a loopback address of its own (127.0.1.N, the pod's IP in its status), in its own
  mount and UTS namespaces (``mountns.Sandbox``): the pod's name as hostname, its own
  ``/etc/hosts`` (its name, and the cluster's head Service names as cluster DNS would resolve
  them), its own tmpfs ``/dev/shm`` (the ``/dev/shm`` emptyDir's ``sizeLimit``, else the
  container's memory limit, as a memory-backed emptyDir is sized), its own ``/tmp``, and the
  pod's volumes bind-mounted (read-only honoured);
- Ray resources as KubeRay derives them: read from the ``ray start`` command KubeRay generated
  for the pod (``--num-cpus`` from the container's CPU limit, ``--memory``, ``--num-gpus``,
  ``--resources`` from ``rayStartParams``; the head keeps ``--num-cpus=0``); the object store
  takes 30% of the memory limit as Ray does in a container, within the ``/dev/shm`` size;
- the container's environment minus what KubeRay sets for its own ``ray start``, and the
  cluster's auth token (KubeRay passes it as ``RAY_AUTH_TOKEN`` from ``authOptions``' Secret);
- the container's preStop ``exec`` hook run inside the pod (``nsenter`` into the node's mount
  and UTS namespaces, with the container's whole environment), before SIGTERM, when the pod is
  deleted;
- Ready once the node serves (a head: its Jobs API answers; a worker: its raylet registered
  with the head's GCS); deleting a pod stops its node; a node that exits fails its pod with
  ray start's exit code. A worker whose head is gone loses its GCS and exits after Ray's
  reconnect timeout (shortened here to ``WORKER_GCS_TIMEOUT_S``), as it would in a cluster.

Drivers: ``host_aliases`` resolves a driver's ``RAY_ADDRESS`` (``<cluster>-head-svc...``) to
the address of the node playing that cluster's head pod, as the head Service would: the Ready
head pod, not being deleted, of the RayCluster of that name that exists now (a RayCluster
deleted and created again under the same name is another cluster: its pods are matched by the
owner's UID).
"""

from __future__ import annotations

import json
import logging
import math
import shlex
import signal
import subprocess
import threading
from urllib.parse import urlparse

from kubernetes import client

from . import mountns, podspec
from .driver_runner import hosts_file
from .pod_runner import PodProcess, PodRunner
from .ray_node import DASHBOARD_PORT, NodeResources, RayNode

log = logging.getLogger(__name__)

HEAD_SERVICE_SUFFIX = "-head-svc"
ROLE_HEAD, ROLE_WORKER = "ray-head", "ray-worker"
SELECTOR = f"grpo.dev/role in ({ROLE_HEAD},{ROLE_WORKER})"
# KubeRay's own settings for its `ray start`; the harness makes its own.
_KUBERAY_ENV_PREFIXES = ("RAY_", "KUBERAY_")
_KEPT_RAY_ENV = {"RAY_JOB_STOP_WAIT_TIME_S"}
# Ray's default is 60 s; a worker whose head is gone exits this long after losing its GCS.
WORKER_GCS_TIMEOUT_S = 10
_START_TIMEOUT_S = 120
_OBJECT_STORE_SHARE = 0.3


def head_of(address: str) -> tuple[str, str] | None:
    """(namespace, RayCluster) named by a head Service address, e.g.
    ``http://run-head-svc.ns.svc.cluster.local:8265`` → ("ns", "run")."""
    host = urlparse(address).hostname or ""
    parts = host.split(".")
    if len(parts) < 2 or not parts[0].endswith(HEAD_SERVICE_SUFFIX):
        return None
    return parts[1], parts[0][: -len(HEAD_SERVICE_SUFFIX)]


def service_names(namespace: str, cluster: str) -> list[str]:
    svc = f"{cluster}{HEAD_SERVICE_SUFFIX}"
    return [svc, f"{svc}.{namespace}", f"{svc}.{namespace}.svc",
            f"{svc}.{namespace}.svc.cluster.local"]


# --- what KubeRay asked of the node (pure) ------------------------------------------------------

_QUANTITY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6,
             "G": 10**9, "T": 10**12, "m": 1e-3}


def quantity(text: str) -> float:
    """A Kubernetes quantity (``2``, ``500m``, ``4Gi``) as a number."""
    for suffix, factor in sorted(_QUANTITY.items(), key=lambda kv: -len(kv[0])):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def ray_start_command(container: dict, env: dict[str, str]) -> list[str]:
    """The ``ray start`` arguments KubeRay generated for the pod (its container runs them in a
    shell line such as ``ulimit -n 65536; ray start --head ... --block``)."""
    line = env.get("KUBERAY_GEN_RAY_START_CMD") or " ".join(
        (container.get("command") or []) + (container.get("args") or []))
    for part in line.split(";"):
        words = shlex.split(part)
        for i in range(len(words) - 1):
            if words[i].endswith("ray") and words[i + 1] == "start":
                return words[i + 2 :]
    raise podspec.PodSpecError(f"no `ray start` in the container's command: {line!r}")


def node_resources(container: dict, start_args: list[str], volumes: list[dict]) -> tuple[
        NodeResources, int]:
    """The node's Ray resources and its /dev/shm size in bytes."""
    flags: dict[str, str] = {}
    for arg in start_args:
        if arg.startswith("--") and "=" in arg:
            key, value = arg[2:].split("=", 1)
            flags[key] = value
    limits = (container.get("resources") or {}).get("limits") or {}
    memory = int(quantity(limits["memory"])) if "memory" in limits else None
    if "memory" in flags:
        memory = int(flags["memory"])
    cpus = flags.get("num-cpus") or str(math.ceil(quantity(limits.get("cpu", "1"))))
    shm = next((v.get("emptyDir", {}).get("sizeLimit") for v in volumes
                if v.get("emptyDir", {}).get("medium") == "Memory"), None)
    shm_bytes = int(quantity(shm)) if shm else (memory or 2**30)
    object_store = min(int((memory or 2**30) * _OBJECT_STORE_SHARE), int(shm_bytes * 0.95))
    custom = json.loads(flags["resources"]) if flags.get("resources") else {}
    return NodeResources(num_cpus=float(cpus), num_gpus=float(flags.get("num-gpus", 0)),
                         memory_bytes=memory, custom=custom,
                         object_store_bytes=object_store), shm_bytes


# --- the runner ---------------------------------------------------------------------------------


class RayPods(PodRunner):
    """Plays the Ray pods of the selected RayClusters (see the module docstring)."""

    name = "ray-pods"
    first_ip = "127.0.1.1"

    def __init__(self, api: client.ApiClient, root, *, mountpoints: mountns.Mountpoints,
                 selector: str = SELECTOR):
        super().__init__(api, root, selector=selector)
        self.mountpoints = mountpoints
        self.custom = client.CustomObjectsApi(api)
        # One node starting at a time: `ray start` takes both cores for seconds.
        self.starting = threading.Semaphore(1)

    def new_pod(self, pod: dict) -> PodProcess:
        return _RayPod(self, pod)

    def head(self, namespace: str, cluster_uid: str) -> RayNode | None:
        """The node of the RayCluster's head pod if it serves: Ready and not being deleted."""
        with self._lock:
            pods = [p for p in self._pods.values() if p.is_head and p.namespace == namespace
                    and p.cluster_uid == cluster_uid and p.serving()]
        return pods[-1].node if pods else None

    def cluster_uid(self, namespace: str, cluster: str) -> str | None:
        """The UID of the RayCluster of that name now (None: there is none)."""
        try:
            rc = self.custom.get_namespaced_custom_object("ray.io", "v1", namespace,
                                                          "rayclusters", cluster)
        except client.ApiException as e:
            if e.status == 404:
                return None
            # A DNS lookup that fails for a moment: the pod waits and retries, not fails.
            raise podspec.MissingObject(f"RayCluster {namespace}/{cluster}: {e.reason}") from e
        return rc["metadata"]["uid"]

    def nodes(self, namespace: str, cluster: str) -> dict[str, RayNode]:
        """Pod name -> running node, for every pod of the RayCluster played here."""
        with self._lock:
            pods = [p for p in self._pods.values() if not p.finished]
        return {p.name: p.node for p in pods
                if p.namespace == namespace and p.cluster == cluster and p.node is not None}

    def host_aliases(self, pod: dict) -> dict[str, list[str]]:
        """The driver runner's hook: the head a driver addresses, once it serves (until then
        the driver pod waits, as its DNS lookups would fail)."""
        for container in pod["spec"]["containers"]:
            for var in container.get("env") or []:
                if var["name"] == "RAY_ADDRESS" and var.get("value"):
                    named = head_of(var["value"])
                    if named:
                        uid = self.cluster_uid(*named)
                        head = self.head(named[0], uid) if uid else None
                        if head is None:
                            raise podspec.MissingObject(
                                f"the head of RayCluster {named[0]}/{named[1]} is not ready")
                        return {head.ip: service_names(*named)}
        return {}

    def __len__(self) -> int:
        """Running head nodes (one per RayCluster played here)."""
        with self._lock:
            return sum(1 for p in self._pods.values()
                       if p.is_head and not p.finished and p.node is not None)


class _RayPod(PodProcess):
    runner: RayPods
    runs_hooks = True

    def __init__(self, runner: RayPods, pod: dict):
        super().__init__(runner, pod)
        labels = pod["metadata"].get("labels") or {}
        self.cluster = labels.get("ray.io/cluster", "")
        self.cluster_uid = next((o["uid"] for o in pod["metadata"].get("ownerReferences") or []
                                 if o.get("kind") == "RayCluster"), "")
        self.is_head = labels.get("ray.io/node-type") == "head"
        self.node: RayNode | None = None
        self.container_env: dict[str, str] = {}
        self.is_ready = False
        # A head must serve exactly the head Service's port.
        self.pod_ip = runner.allocate_ip(DASHBOARD_PORT)

    def serving(self) -> bool:
        """In the head Service's endpoints: Ready and not being deleted."""
        return (not self.finished and not self._deleted and self.is_ready
                and self.node is not None and self.node.exited() is None)

    def launch(self) -> None:
        ns, spec = self.namespace, self.pod["spec"]
        head = None if self.is_head else self.runner.head(ns, self.cluster_uid)
        if not self.is_head and head is None:
            raise podspec.MissingObject(f"the head of RayCluster {ns}/{self.cluster} is not "
                                        "ready")  # KubeRay's init container waits for the GCS
        self.dir.mkdir(parents=True, exist_ok=True)
        # The pod's fields (status.podIP) as the kubelet will report them.
        pod = {**self.pod, "status": {**(self.pod.get("status") or {}), "podIP": self.pod_ip}}
        volumes = podspec.materialise_volumes(pod, self.dir, self.runner.objects)
        # The sandbox brings the container's own /dev/shm and /tmp (fresh at each start).
        mounts, _ = podspec.split_tmp([m for m in podspec.mounts(self.container, volumes)
                                       if m.target != "/dev/shm"])
        self.runner.mountpoints.ensure(mounts)
        env = podspec.environment(pod, self.container, self.runner.objects)
        self.container_env = env
        resources, shm_bytes = node_resources(self.container, ray_start_command(
            self.container, env), spec.get("volumes") or [])
        kept = {k: v for k, v in env.items()
                if k in _KEPT_RAY_ENV or not k.startswith(_KUBERAY_ENV_PREFIXES)}
        hosts = self.dir / "hosts"
        hosts.write_text(hosts_file(pod, {}, self.pod_ip))
        if head is not None:
            with hosts.open("a") as f:
                f.write(f"{head.ip}\t{' '.join(service_names(ns, self.cluster))}\n")
        sandbox = mountns.Sandbox(hostname=self.name[:63], hosts_file=hosts, shm_bytes=shm_bytes,
                                  read_only_root=podspec.read_only_root(self.container))
        root = self.dir / f"node-{self.restarts}"  # a restarted container starts afresh
        self.is_ready = False
        log.info("starting Ray %s node for pod %s/%s on %s (%s)", "head" if self.is_head
                 else "worker", ns, self.name, self.pod_ip, resources)
        with self.runner.starting:
            if self.is_head:
                self.node = RayNode.head(
                    ip=self.pod_ip, env=kept, token=env.get("RAY_AUTH_TOKEN"), mounts=mounts,
                    sandbox=sandbox, resources=resources, root=root, wait=False,
                    job_stop_wait_s=int(kept.get("RAY_JOB_STOP_WAIT_TIME_S", "30")),
                    dashboard_port=DASHBOARD_PORT)
            else:
                worker_env = {**kept,
                              "RAY_gcs_rpc_server_reconnect_timeout_s": str(WORKER_GCS_TIMEOUT_S)}
                self.node = RayNode.worker(
                    head.gcs_address, head.token, ip=self.pod_ip, env=worker_env,
                    mounts=mounts, sandbox=sandbox, resources=resources, root=root)
            self._wait_started()

    def _wait_started(self) -> None:
        """Hold the start slot until the node serves, exits, or the pod is deleted."""
        deadline = _START_TIMEOUT_S
        while deadline > 0 and not self._deleted and self.node.exited() is None:
            if self.ready():
                return
            self._wake.wait(0.5)
            deadline -= 0.5

    def ready(self) -> bool:
        if not self.is_ready and self.node is not None:
            self.is_ready = bool(self.node.ready())
        return self.is_ready

    def exit_code(self) -> int | None:
        return self.node.exited()

    def signal(self, sig: int) -> None:
        if sig == signal.SIGTERM:  # `ray start --block` shuts its node down on SIGTERM
            self.node.process.popen.send_signal(sig)
        else:
            threading.Thread(target=self.node.stop, kwargs={"grace": 0, "remove": False},
                             daemon=True).start()

    def exec_hook(self, argv: list[str]) -> subprocess.Popen:
        if self.node is None or self.node.exited() is not None:
            raise podspec.PodSpecError("the container is not running")
        env = podspec.process_environment(self.name, self.container_env)
        out = (self.dir / "prestop.log").open("ab")
        try:
            return subprocess.Popen(
                ["nsenter", f"--target={self.node.process.popen.pid}", "--mount", "--uts",
                 f"--wd={self.container.get('workingDir') or '/'}", "--", *argv],
                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        finally:
            out.close()

    def cleanup(self) -> None:
        """The node's leftovers (job entrypoints, actors), as a container's cgroup dies."""
        try:
            self.node.stop(grace=5, remove=False)
        except Exception as e:  # noqa: BLE001 - a leftover is reported, never fatal here
            log.warning("pod %s/%s: %s", self.namespace, self.name, e)
