"""Real local Ray heads standing in for RayClusters, started when a driver needs one.

KWOK fakes a RayCluster's pods, so nothing would answer a driver that submits to the head
Service. When a driver pod's ``RAY_ADDRESS`` names ``<cluster>-head-svc.<namespace>...``, the
driver runner asks this class for host aliases; it then starts a real Ray head for that
RayCluster (once) on a loopback address of its own (127.0.N.M), with:

- the head pod's volume mounts (bind-mounted in a private mount namespace, by the same mapping
  rule as driver pods; ``/dev/shm`` stays the machine's), so the trainer sees ``/model``,
  ``/data``, ``/checkpoints`` and ``/etc/grpo`` as on the head;
- the head container's environment, minus what KubeRay injects for its own ``ray start``;
- the cluster's auth token (KubeRay passes it to the head as ``RAY_AUTH_TOKEN`` from the
  ``authOptions`` Secret), so the driver authenticates with the Secret it mounts.

The local head stands in for the whole RayCluster (head and workers): it gets this machine's
CPUs. It is stopped when its RayCluster is deleted or the cluster stops.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import shutil
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

from kubernetes import client
from kubernetes.client.rest import ApiException

from . import mountns, podspec
from .ray_head import DASHBOARD_PORT, RayHead

log = logging.getLogger(__name__)

HEAD_SERVICE_SUFFIX = "-head-svc"
# KubeRay's own settings for its `ray start`; the local head makes its own.
_KUBERAY_ENV_PREFIXES = ("RAY_", "KUBERAY_")
_KEPT_RAY_ENV = {"RAY_JOB_STOP_WAIT_TIME_S"}


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


class LocalRayHeads:
    def __init__(self, api: client.ApiClient, root: Path, objects: podspec.ObjectSource,
                 mountpoints: mountns.Mountpoints):
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.root = root
        self.objects = objects
        self.mountpoints = mountpoints
        self._heads: dict[tuple[str, str], RayHead] = {}
        self._uids: dict[tuple[str, str], tuple[str, str]] = {}  # (RayCluster, head pod)
        self._next_ip = int(ipaddress.ip_address("127.0.1.1"))
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._reaper = threading.Thread(target=self._reap, name="ray-head-reaper", daemon=True)
        self._reaper.start()
        self._starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ray-head-starter")

    def host_aliases(self, pod: dict) -> dict[str, list[str]]:
        """The driver runner's hook: resolve the head the driver addresses, starting it."""
        for container in pod["spec"]["containers"]:
            for var in container.get("env") or []:
                if var["name"] == "RAY_ADDRESS" and var.get("value"):
                    named = head_of(var["value"])
                    if named:
                        head = self.ensure(*named)
                        return {head.ip: service_names(*named)}
        return {}

    def ensure(self, namespace: str, cluster: str) -> RayHead:
        key = (namespace, cluster)
        with self._lock:  # one start at a time: starting a head takes both cores for seconds
            if key in self._heads:
                # A head kept for a cluster of the same name that has since been replaced (a
                # new attempt's RayCluster) must not serve the new one's driver: the reaper
                # would stop it under that driver.
                if not self._cluster_gone(key):
                    return self._heads[key]
                self._stop(key, self._heads.pop(key))
            rc = self.custom.get_namespaced_custom_object("ray.io", "v1", namespace,
                                                          "rayclusters", cluster)
            pods = self.core.list_namespaced_pod(
                namespace, label_selector=f"ray.io/cluster={cluster},ray.io/node-type=head"
            ).items
            if not pods:
                raise podspec.PodSpecError(f"RayCluster {namespace}/{cluster} has no head pod")
            pod = self.core.api_client.sanitize_for_serialization(pods[0])
            # Started from a thread that lives as long as this object: a head dies with the
            # thread that started it (PR_SET_PDEATHSIG follows threads), and the caller is a
            # driver pod's thread, which ends with that pod.
            head = self._starter.submit(self._start, namespace, cluster, pod).result()
            self._heads[key] = head
            self._uids[key] = (rc["metadata"]["uid"], pod["metadata"]["uid"])
            return head

    def _start(self, namespace: str, cluster: str, pod: dict) -> RayHead:
        container = pod["spec"]["containers"][0]
        pod_dir = self.root / "ray-heads" / namespace / cluster
        volumes = podspec.materialise_volumes(pod, pod_dir, self.objects)
        mounts = [m for m in podspec.mounts(container, volumes) if m.target != "/dev/shm"]
        self.mountpoints.ensure(mounts)
        env = podspec.environment(pod, container, self.objects)
        token = env.get("RAY_AUTH_TOKEN")
        kept = {k: v for k, v in env.items()
                if k in _KEPT_RAY_ENV or not k.startswith(_KUBERAY_ENV_PREFIXES)}
        ip = self._free_address()
        log.info("starting a local Ray head for RayCluster %s/%s on %s", namespace, cluster, ip)
        return RayHead.start(
            ip=ip, env=kept, token=token, mounts=mounts, num_cpus=os.cpu_count() or 2,
            job_stop_wait_s=int(kept.get("RAY_JOB_STOP_WAIT_TIME_S", "30")),
            dashboard_port=DASHBOARD_PORT,
        )

    def _free_address(self) -> str:
        """The next loopback address where nothing answers on the Jobs API port: the driver
        dials the head Service's port, so the head must have exactly that one."""
        for _ in range(256):
            ip = str(ipaddress.ip_address(self._next_ip))
            self._next_ip += 1
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                if probe.connect_ex((ip, DASHBOARD_PORT)) != 0:  # nothing answers there
                    return ip
        raise podspec.PodSpecError(f"port {DASHBOARD_PORT} is taken on every loopback address")

    def _reap(self) -> None:
        while not self._stopping.wait(2.0):
            with self._lock:
                heads = list(self._heads.items())
            for key, head in heads:
                with self._lock:
                    # ensure() may have replaced it meanwhile (and stopped this one).
                    if self._heads.get(key) is not head or not self._cluster_gone(key):
                        continue
                    del self._heads[key]
                log.info("RayCluster %s/%s or its head pod is gone: stopping its local head",
                         *key)
                self._stop(key, head)

    def _cluster_gone(self, key: tuple[str, str]) -> bool:
        """The RayCluster the head was started for, or the head pod it stands for, is gone
        (a real head dies with its pod: KubeRay's replacement is a new, empty Ray cluster)."""
        cluster_uid, pod_uid = self._uids[key]
        try:
            rc = self.custom.get_namespaced_custom_object("ray.io", "v1", key[0],
                                                          "rayclusters", key[1])
            pods = self.core.list_namespaced_pod(
                key[0], label_selector=f"ray.io/cluster={key[1]},ray.io/node-type=head").items
        except ApiException as e:
            return e.status == 404
        return (rc["metadata"]["uid"] != cluster_uid
                or bool(rc["metadata"].get("deletionTimestamp"))
                or all(p.metadata.uid != pod_uid or p.metadata.deletion_timestamp
                       for p in pods))

    def stop(self) -> None:
        self._stopping.set()
        self._reaper.join(5)
        with self._lock:
            heads, self._heads = list(self._heads.items()), {}
        for key, head in heads:
            self._stop(key, head)
        self._starter.shutdown()

    def _stop(self, key: tuple[str, str], head: RayHead) -> None:
        """Stop a head, keeping its logs next to the pod's files (its own directory is short
        and temporary: Ray's socket paths must stay under 107 bytes)."""
        keep = self.root / "ray-heads" / key[0] / key[1]
        with contextlib.suppress(OSError):
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(head.log, keep / "ray-start.log")
            shutil.copytree(head.temp_dir / "session_latest" / "logs", keep / "ray-logs",
                            dirs_exist_ok=True)
        with contextlib.suppress(Exception):
            head.stop()

    def __len__(self) -> int:
        with self._lock:
            return len(self._heads)
