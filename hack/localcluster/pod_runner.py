"""The harness's kubelet: the part every pod it plays shares.

KWOK fakes most pods; the pods a ``PodRunner`` selects are left to it, and it runs each as
real local processes (what a pod becomes is its subclass's ``PodProcess``: a driver's command,
a Ray node). Shared here, as a kubelet does it:

- a watch on the selected pods; a pod is started once it is scheduled (``spec.nodeName``);
- inputs first: a pod whose ConfigMaps, Secrets or claims are not there yet (``MissingObject``)
  waits and retries, as a kubelet keeps a pod in ContainerCreating, instead of failing for good
  (the namespace's ``kube-root-ca.crt`` appears a moment after the namespace does);
- the pod's status: Running when started, Ready when the process says so, then
  Succeeded/Failed with the real exit code (128+N for a signal) — or, under the pod's
  ``restartPolicy`` (``Always``, as KubeRay's pods have), the container started again in the
  same pod after the kubelet's back-off, its restart counted;
- deletion: the container's preStop ``exec`` hook first (in the container, as ``kubectl exec``
  would run it), then SIGTERM once it returned, SIGKILL when the grace period (hook included)
  has passed — 2 s after a late SIGTERM if the hook used the whole grace period, as the kubelet
  extends it — then the pod is removed as a kubelet removes it. With ``run_pods=False`` nothing
  is run: pods stay Pending (a node that never starts them) and a deleted one is removed.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import ipaddress
import logging
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from . import podspec

log = logging.getLogger(__name__)

_TERMINAL = ("Succeeded", "Failed")
_INPUT_RETRY_S = 1.0
# The kubelet's container restart back-off: 10 s, doubling, at most 5 minutes.
_RESTART_BACKOFF_S = 10.0
_MAX_RESTART_BACKOFF_S = 300.0
# The kubelet's one-off extension when a preStop hook used up the grace period.
_LATE_SIGTERM_GRACE_S = 2.0


def now() -> str:
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


class PodRunner:
    """Watches the pods ``selector`` picks and plays their kubelet (see the module docstring).
    Subclasses say what a pod becomes (``new_pod``).

    Pods share the host's network here; each gets a loopback address of its own as its pod IP
    (``allocate_ip``), from its runner's ``first_ip`` on, so that its servers listen on their
    containers' own ports as in a pod's network namespace."""

    name = "pod-runner"
    first_ip = "127.0.0.1"

    def __init__(self, api: client.ApiClient, root: Path, *, selector: str,
                 run_pods: bool = True):
        self.api = api
        self.core = client.CoreV1Api(api)
        self.objects = ApiObjects(api)
        self.root = root
        self.selector = selector
        self.run_pods = run_pods
        self._pods: dict[str, PodProcess] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watch: watch.Watch | None = None
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._next_ip = int(ipaddress.ip_address(self.first_ip))
        self._ip_lock = threading.Lock()

    def allocate_ip(self, port: int) -> str:
        """The next loopback address where nothing answers on ``port`` (a pod's server must
        own its container's port)."""
        with self._ip_lock:
            for _ in range(256):
                ip = str(ipaddress.ip_address(self._next_ip))
                self._next_ip += 1
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                    if probe.connect_ex((ip, port)) != 0:
                        return ip
        raise podspec.PodSpecError(f"port {port} is taken on every loopback address")

    def new_pod(self, pod: dict) -> PodProcess:
        raise NotImplementedError

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
            pod.join(30)
        self._thread.join(10)

    def pod_dir(self, namespace: str, name: str) -> Path:
        return self.root / "pods" / namespace / name

    def process_log(self, namespace: str, name: str) -> Path:
        """Where the runner writes a pod's output (``kubectl logs`` has no kubelet to ask)."""
        return self.pod_dir(namespace, name) / "container.log"

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
                    log.warning("%s watch failed: %s", self.name, e)
                    time.sleep(1)
            except Exception as e:  # noqa: BLE001 - the runner must outlive API hiccups
                if not self._stopping.is_set():
                    log.warning("%s watch error: %r", self.name, e)
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
                    remove(self.core, pod)
                return
            phase = (pod.get("status") or {}).get("phase")
            if (not self.run_pods or running or not pod["spec"].get("nodeName")
                    or phase in _TERMINAL):
                return
            process = self.new_pod(pod)
            self._pods[uid] = process
            process.start()


def _fail_unstarted(core: client.CoreV1Api, pod: dict) -> None:
    """A deleted pod that never ran is Failed, as a kubelet marks it: until a Job's pod is
    terminal, the Job controller keeps its tracking finalizer and the deletion never ends."""
    meta = pod["metadata"]
    with contextlib.suppress(ApiException):
        core.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": {
            "phase": "Failed", "reason": "Deleted", "message": "deleted before it ran"}})


def remove(core: client.CoreV1Api, pod: dict) -> None:
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


class Deleted(Exception):
    """The pod was deleted before its containers started."""


class PodProcess:
    """One pod's lifecycle on its own thread: inputs, start, Ready, exit, status. Subclasses
    implement ``launch`` (start the processes; return once started), ``ready``, ``exit_code``
    (None while running), ``signal`` and ``cleanup``."""

    pod_ip = "127.0.0.1"
    runs_hooks = False

    def __init__(self, runner: PodRunner, pod: dict):
        self.runner = runner
        self.pod = pod
        meta = pod["metadata"]
        self.namespace, self.name = meta["namespace"], meta["name"]
        self.dir = runner.pod_dir(self.namespace, self.name)
        self.container = pod["spec"]["containers"][0]
        self.pre_stop: list[str] | None = None  # read at launch (a bad hook fails the pod)
        self._terminate_at: float | None = None
        self._deleted = False
        self.restarts = 0
        self._last_state: dict | None = None
        # Set under the runner's lock, so a deletion is either seen by this thread or handled
        # by the watch loop, never lost between them.
        self.finished = False
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"pod-{self.name}", daemon=True)

    # -- what a pod becomes ----------------------------------------------------------------

    def launch(self) -> None:
        raise NotImplementedError

    def ready(self) -> bool:
        return True

    def exit_code(self) -> int | None:
        raise NotImplementedError

    def signal(self, sig: int) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        """After the exit: anything the pod's processes left behind."""

    def exec_hook(self, argv: list[str]) -> subprocess.Popen:
        """Start ``argv`` inside the running container (its preStop hook); only where
        ``runs_hooks``."""
        raise NotImplementedError

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def terminate(self, grace: float) -> None:
        """Deletion: the preStop hook, SIGTERM, SIGKILL when the grace period has passed."""
        deadline = time.monotonic() + grace
        if self._terminate_at is None or deadline < self._terminate_at:
            self._terminate_at = deadline
        self._deleted = True
        self._wake.set()

    def _run(self) -> None:
        policy = self.pod["spec"].get("restartPolicy", "Always")
        backoff = _RESTART_BACKOFF_S
        while True:
            started = now()
            try:
                self._launch_when_inputs_exist()
            except Deleted:
                self._status({"waiting": {"reason": "ContainerCreating"}}, "Failed",
                             ready=False, started=None,
                             message="deleted before its containers started")
                self._finish()
                return
            except Exception as e:  # noqa: BLE001 - any reason not to start fails the pod
                self._fail_to_start(f"{type(e).__name__}: {e}")
                return
            running = {"running": {"startedAt": started}}
            self._status(running, "Running", ready=False, started=started)
            code = self._wait(functools.partial(self._status, running, "Running", ready=True,
                                                started=started))
            self.cleanup()
            terminated = {"terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": started,
                "finishedAt": now(),
                "containerID": f"harness://{self.namespace}/{self.name}/{self.restarts}",
            }}
            restart = not self._deleted and (policy == "Always"
                                              or (policy == "OnFailure" and code != 0))
            if not restart:
                self._status(terminated, "Succeeded" if code == 0 else "Failed", ready=False,
                             started=started)
                self._finish()
                return
            # The kubelet restarts the container in the same pod, backing off (CrashLoop).
            self._last_state = terminated
            self.restarts += 1
            self._status({"waiting": {"reason": "CrashLoopBackOff"}}, "Running", ready=False,
                         started=started)
            log.info("pod %s/%s: container exited %d, restarting in %.0f s", self.namespace,
                     self.name, code, backoff)
            self._wake.wait(backoff)
            self._wake.clear()
            backoff = min(backoff * 2, _MAX_RESTART_BACKOFF_S)

    def _launch_when_inputs_exist(self) -> None:
        self.pre_stop = podspec.pre_stop_command(self.container)
        if self.pre_stop and not self.runs_hooks:
            raise podspec.PodSpecError(f"the harness runs no lifecycle hooks in "
                                       f"{self.runner.name} pods")
        waiting_since = None
        while True:
            if self._deleted:
                raise Deleted
            try:
                self.launch()
                return
            except podspec.MissingObject as e:
                if waiting_since is None:
                    waiting_since = time.monotonic()
                    log.info("pod %s/%s waits for its inputs: %s", self.namespace, self.name, e)
                    # A restarted container's pod stays Running (a phase never goes back).
                    self._status({"waiting": {"reason": "ContainerCreating", "message": str(e)}},
                                 "Running" if self.restarts else "Pending", ready=False,
                                 started=None)
                self._wake.wait(_INPUT_RETRY_S)
                self._wake.clear()

    def _finish(self) -> None:
        with self.runner._lock:
            self.finished = True
            deleted = self._deleted
        if deleted:
            remove(self.runner.core, self.pod)

    def _wait(self, on_ready) -> int:
        signalled = was_ready = False
        hook: subprocess.Popen | None = None
        while True:
            code = self.exit_code()
            if code is not None:
                if hook is not None and hook.poll() is None:
                    hook.kill()
                return 128 - code if code < 0 else code
            if not was_ready and not self._deleted and self.ready():
                was_ready = True
                on_ready()
            if self._terminate_at is not None:
                if not signalled and hook is None and self.pre_stop:
                    hook = self._start_hook()
                late = time.monotonic() >= self._terminate_at
                if not signalled and (hook is None or hook.poll() is not None or late):
                    self.signal(signal.SIGTERM)
                    signalled = True
                    if late:
                        self._terminate_at = time.monotonic() + _LATE_SIGTERM_GRACE_S
                elif signalled and late:
                    self.signal(signal.SIGKILL)
            self._wake.wait(0.1 if was_ready or self._deleted else 0.5)
            self._wake.clear()

    def _start_hook(self) -> subprocess.Popen | None:
        log.info("pod %s/%s: preStop hook %s", self.namespace, self.name, self.pre_stop)
        try:
            return self.exec_hook(self.pre_stop)
        except Exception as e:  # noqa: BLE001 - a hook that cannot start: SIGTERM at once
            log.warning("pod %s/%s: preStop hook failed to start: %s", self.namespace,
                        self.name, e)
            return None

    def _fail_to_start(self, message: str) -> None:
        log.warning("pod %s/%s cannot start: %s", self.namespace, self.name, message)
        state = {"waiting": {"reason": "CreateContainerConfigError", "message": message}}
        self._status(state, "Failed", ready=False, started=None, message=message)
        self._finish()

    def _status(self, state: dict, phase: str, *, ready: bool, started: str | None,
                message: str | None = None) -> None:
        stamp = now()
        flag = "True" if ready else "False"
        status = {
            "phase": phase,
            "hostIP": "127.0.0.1",
            "podIP": self.pod_ip,
            "podIPs": [{"ip": self.pod_ip}],
            "startTime": started or stamp,
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": stamp},
                {"type": "ContainersReady", "status": flag, "lastTransitionTime": stamp},
                {"type": "Ready", "status": flag, "lastTransitionTime": stamp},
            ],
            "containerStatuses": [
                {
                    "name": self.container["name"],
                    "image": self.container.get("image", ""),
                    "imageID": "",
                    "ready": ready,
                    "started": "running" in state,
                    "restartCount": self.restarts,
                    "state": state,
                    **({"lastState": self._last_state} if self._last_state else {}),
                }
            ],
        }
        if message:
            status["message"] = message
        with contextlib.suppress(ApiException):
            self.runner.core.patch_namespaced_pod_status(
                self.name, self.namespace, {"status": status}
            )
