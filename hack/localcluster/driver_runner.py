"""The harness's kubelet for driver pods.

KWOK fakes every other pod; pods labelled ``grpo.dev/role=driver`` are left to this runner,
which runs the container's command as a real local process:

- in a private mount namespace (``unshare --mount``) where each volume is bind-mounted at its
  ``mountPath`` (read-only when the mount says so), the service-account token at
  ``/var/run/secrets/kubernetes.io/serviceaccount`` (from the TokenRequest API, bound to the
  pod, exactly as a kubelet asks for it) and a generated ``/etc/hosts``;
- with the container's environment, ``KUBERNETES_SERVICE_HOST/PORT`` pointing at the local API
  server (so in-cluster clients work unchanged) and the harness's Python first on ``PATH``
  (the harness has no images: the "image" is this virtualenv);
- with ``GRPO_DRIVER_METRICS_PORT`` set to a free port (pods share the host's network here);
- writing the pod's status: Running when started, then Succeeded/Failed with the real exit
  code (128+N for a signal); a pod deletion becomes SIGTERM to the process group, then SIGKILL
  after the grace period, then the pod is removed as a kubelet would remove it.

With ``run_pods=False`` nothing is run: driver pods are scheduled and stay Pending (a node that
never starts them), and a deleted one is removed as a kubelet would remove it — for benchmarks
that create many runs and need no driver to train.

Host names: ``/etc/hosts`` carries the pod's ``hostAliases`` and whatever ``host_aliases``
returns for the pod — the hook by which a driver's RayCluster head Service can resolve to a real
local Ray head on a loopback address.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from . import mountns, podspec
from .processes import _die_with_parent, free_port

log = logging.getLogger(__name__)

HostAliases = Callable[[dict], dict[str, list[str]]]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiObjects(podspec.ObjectSource):
    """Reads the objects a pod references through the API (as a kubelet would)."""

    def __init__(self, api: client.ApiClient):
        self.core = client.CoreV1Api(api)

    def _read(self, fn, *args):
        try:
            return fn(*args)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def config_map(self, namespace, name):
        cm = self._read(self.core.read_namespaced_config_map, name, namespace)
        return None if cm is None else dict(cm.data or {})

    def secret(self, namespace, name):
        secret = self._read(self.core.read_namespaced_secret, name, namespace)
        return None if secret is None else podspec.decode_secret(secret.data or {})

    def pvc_host_path(self, namespace, claim):
        pvc = self._read(self.core.read_namespaced_persistent_volume_claim, claim, namespace)
        if pvc is None or not pvc.spec.volume_name or pvc.status.phase != "Bound":
            return None
        pv = self.core.read_persistent_volume(pvc.spec.volume_name)
        source = pv.spec.host_path or pv.spec.local
        return Path(source.path) if source else None

    def service_account_token(self, pod, audience, expiration_seconds):
        meta = pod["metadata"]
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[audience] if audience else [],
                expiration_seconds=expiration_seconds,
                bound_object_ref=client.V1BoundObjectReference(
                    api_version="v1", kind="Pod", name=meta["name"], uid=meta["uid"]
                ),
            )
        )
        sa = pod["spec"].get("serviceAccountName") or "default"
        return self.core.create_namespaced_service_account_token(
            sa, meta["namespace"], request
        ).status.token


class DriverRunner:
    """Watches driver pods and runs each as a local process (see the module docstring)."""

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
        self.api = api
        self.core = client.CoreV1Api(api)
        self.objects = ApiObjects(api)
        self.root = root
        self.selector = selector
        self.apiserver_port = apiserver_port
        self.host_aliases = host_aliases or (lambda pod: {})
        self.run_pods = run_pods
        self._pods: dict[str, _PodProcess] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watch: watch.Watch | None = None
        self._thread = threading.Thread(target=self._run, name="driver-runner", daemon=True)
        self.mountpoints = mountpoints

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._watch:
            self._watch.stop()
        with self._lock:
            pods = list(self._pods.values())
        for pod in pods:
            pod.terminate(grace=5)
        for pod in pods:
            pod.join(10)
        self._thread.join(10)

    def process_log(self, namespace: str, name: str) -> Path:
        """Where the runner writes a pod's stdout and stderr (``kubectl logs`` has no kubelet
        to ask here)."""
        return self.root / "pods" / namespace / name / "container.log"

    def job_log(self, namespace: str, job: str) -> Path | None:
        """The log of the newest pod of Job ``job`` that the runner ran (None: none yet)."""
        pods = sorted((self.root / "pods" / namespace).glob(f"{job}-*/container.log"),
                      key=lambda p: p.stat().st_mtime)
        return pods[-1] if pods else None

    # -- watch loop ------------------------------------------------------------------------

    def _run(self) -> None:
        resource_version = None
        while not self._stopping.is_set():
            self._watch = watch.Watch()
            try:
                if resource_version is None:
                    listing = self.core.list_pod_for_all_namespaces(label_selector=self.selector)
                    resource_version = listing.metadata.resource_version
                    for pod in listing.items:
                        self._observe("ADDED", self.api.sanitize_for_serialization(pod))
                for event in self._watch.stream(
                    self.core.list_pod_for_all_namespaces,
                    label_selector=self.selector,
                    resource_version=resource_version,
                    timeout_seconds=60,
                    _preload_content=False,
                ):
                    pod = event["raw_object"]
                    resource_version = pod["metadata"].get("resourceVersion", resource_version)
                    self._observe(event["type"], pod)
            except ApiException as e:
                if e.status == 410:  # watch expired: relist
                    resource_version = None
                elif not self._stopping.is_set():
                    log.warning("driver-runner watch failed: %s", e)
                    time.sleep(1)
            except Exception as e:  # noqa: BLE001 - the runner must outlive API hiccups
                if not self._stopping.is_set():
                    log.warning("driver-runner watch error: %r", e)
                    time.sleep(1)

    def _observe(self, kind: str, pod: dict) -> None:
        uid = pod["metadata"]["uid"]
        with self._lock:
            running = self._pods.get(uid)
            active = running is not None and not running.finished
            if kind == "DELETED":
                if active:
                    running.terminate(grace=0)
                return
            if pod["metadata"].get("deletionTimestamp") is not None:
                if active:
                    grace = pod["metadata"].get("deletionGracePeriodSeconds")
                    running.terminate(grace=30 if grace is None else grace)
                else:
                    if (pod.get("status") or {}).get("phase") not in _TERMINAL:
                        _fail_unstarted(self.core, pod)
                    _remove(self.core, pod)
                return
            phase = (pod.get("status") or {}).get("phase")
            if (not self.run_pods or running or not pod["spec"].get("nodeName")
                    or phase in _TERMINAL):
                return
            process = _PodProcess(self, pod)
            self._pods[uid] = process
            process.start()


_TERMINAL = ("Succeeded", "Failed")


def _fail_unstarted(core: client.CoreV1Api, pod: dict) -> None:
    """A deleted pod that never ran is Failed, as a kubelet marks it: until a Job's pod is
    terminal, the Job controller keeps its tracking finalizer and the deletion never ends."""
    meta = pod["metadata"]
    with contextlib.suppress(ApiException):
        core.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": {
            "phase": "Failed", "reason": "Deleted", "message": "deleted before it ran"}})


def _remove(core: client.CoreV1Api, pod: dict) -> None:
    """What a kubelet does once a deleted pod's containers are gone."""
    meta = pod["metadata"]
    with contextlib.suppress(ApiException):
        core.delete_namespaced_pod(
            meta["name"], meta["namespace"],
            body=client.V1DeleteOptions(
                grace_period_seconds=0,
                preconditions=client.V1Preconditions(uid=meta["uid"]),
            ),
        )


_TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class _PodProcess:
    def __init__(self, runner: DriverRunner, pod: dict):
        self.runner = runner
        self.pod = pod
        meta = pod["metadata"]
        self.namespace, self.name = meta["namespace"], meta["name"]
        self.dir = runner.root / "pods" / self.namespace / self.name
        self.popen: subprocess.Popen | None = None
        self._terminate_at: float | None = None
        self._deleted = False
        # Set under the runner's lock, so a deletion is either seen by this thread or handled
        # by the watch loop, never lost between them.
        self.finished = False
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"pod-{self.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def terminate(self, grace: float) -> None:
        """Deletion: SIGTERM now, SIGKILL when the grace period has passed."""
        deadline = time.monotonic() + grace
        if self._terminate_at is None or deadline < self._terminate_at:
            self._terminate_at = deadline
        self._deleted = True
        self._wake.set()

    # -- lifecycle -------------------------------------------------------------------------

    def _run(self) -> None:
        container = self.pod["spec"]["containers"][0]
        started = _now()
        try:
            argv, env, mount_list = self._prepare(container)
        except Exception as e:  # noqa: BLE001 - any reason not to start fails the pod, visibly
            self._fail_to_start(container, f"{type(e).__name__}: {e}")
            return
        log_path = self.runner.process_log(self.namespace, self.name)
        with log_path.open("ab") as out:
            self.popen = subprocess.Popen(
                mountns.wrap(argv, mount_list, container.get("workingDir") or "/"),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True, preexec_fn=_die_with_parent,
            )
        self._status(container, {"running": {"startedAt": started}}, "Running", ready=True,
                     started=started)
        code = self._wait()
        finished = _now()
        state = {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": started,
                "finishedAt": finished,
                "containerID": f"harness://{self.popen.pid}",
            }
        }
        self._status(container, state, "Succeeded" if code == 0 else "Failed", ready=False,
                     started=started)
        self._finish()

    def _finish(self) -> None:
        with self.runner._lock:
            self.finished = True
            deleted = self._deleted
        if deleted:
            _remove(self.runner.core, self.pod)

    def _wait(self) -> int:
        assert self.popen is not None
        signalled = False
        while True:
            code = self.popen.poll()
            if code is not None:
                return 128 - code if code < 0 else code
            if self._terminate_at is not None:
                if not signalled:
                    _signal_group(self.popen.pid, signal.SIGTERM)
                    signalled = True
                if time.monotonic() >= self._terminate_at:
                    _signal_group(self.popen.pid, signal.SIGKILL)
            self._wake.wait(0.1)
            self._wake.clear()

    def _prepare(self, container: dict) -> tuple[list[str], dict[str, str], list[podspec.Mount]]:
        if len(self.pod["spec"]["containers"]) != 1 or self.pod["spec"].get("initContainers"):
            raise podspec.PodSpecError("the harness runs driver pods with exactly one container "
                                       "and no init containers")
        self.dir.mkdir(parents=True, exist_ok=True)
        volumes = podspec.materialise_volumes(self.pod, self.dir, self.runner.objects)
        mount_list = podspec.mounts(container, volumes)
        hosts = self.dir / "hosts"
        hosts.write_text(_hosts_file(self.pod, self.runner.host_aliases(self.pod)))
        mount_list.append(podspec.Mount(hosts, "/etc/hosts", read_only=True))
        self.runner.mountpoints.ensure(mount_list)
        container_env = podspec.environment(self.pod, container, self.runner.objects)
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8",
            "HOSTNAME": self.name,
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.runner.apiserver_port),
            **container_env,
            # Pods here share the host's network: each driver serves its metrics on a port of
            # its own instead of the container's fixed one.
            "GRPO_DRIVER_METRICS_PORT": str(free_port()),
        }
        return podspec.command(container, container_env), env, mount_list

    def _fail_to_start(self, container: dict, message: str) -> None:
        log.warning("driver pod %s/%s cannot start: %s", self.namespace, self.name, message)
        state = {"waiting": {"reason": "CreateContainerConfigError", "message": message}}
        self._status(container, state, "Failed", ready=False, started=None, message=message)
        self._finish()

    def _status(self, container: dict, state: dict, phase: str, *, ready: bool,
                started: str | None, message: str | None = None) -> None:
        now = _now()
        flag = "True" if ready else "False"
        status = {
            "phase": phase,
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": started or now,
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": flag, "lastTransitionTime": now},
                {"type": "Ready", "status": flag, "lastTransitionTime": now},
            ],
            "containerStatuses": [
                {
                    "name": container["name"],
                    "image": container.get("image", ""),
                    "imageID": "",
                    "ready": ready,
                    "started": ready,
                    "restartCount": 0,
                    "state": state,
                }
            ],
        }
        if message:
            status["message"] = message
        with contextlib.suppress(ApiException):
            self.runner.core.patch_namespaced_pod_status(
                self.name, self.namespace, {"status": status}
            )


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _hosts_file(pod: dict, extra: dict[str, list[str]]) -> str:
    lines = ["127.0.0.1\tlocalhost", f"127.0.0.1\t{pod['metadata']['name']}"]
    for alias in pod["spec"].get("hostAliases") or []:
        lines.append(f"{alias['ip']}\t{' '.join(alias.get('hostnames') or [])}")
    for ip, names in extra.items():
        lines.append(f"{ip}\t{' '.join(names)}")
    return "\n".join(lines) + "\n"
