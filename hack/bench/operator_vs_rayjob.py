"""Operator vs KubeRay's RayJob controller: N runs applied at once on the local cluster.

For each N, on one local cluster with enough fake 8-GPU nodes and CPU nodes for every driver
pod, the API server's audit log on, and driver pods left Pending (nothing trains: only creation
and readiness compare):

1. N GRPORuns (the tiny example, one 1-GPU worker on the GPU pool) in one ``kubectl create``,
   served by the operator running as a ServiceAccount of its own;
2. the same N as RayJobs whose ``rayClusterSpec`` is what the operator's RayCluster builder
   makes for those runs, with the operator stopped, twice: in ``K8sJobMode`` (RayJob's default:
   once the cluster is ready KubeRay creates a submitter Job, whose pod is the operator's driver
   pod, left Pending the same way) and in ``InteractiveMode`` (once the cluster is ready KubeRay
   waits for a job id and starts nothing). The ServiceAccount and auth Secret the pods name are
   created beforehand, as a RayJob's user would.

Per run, from its creation (the parent's ADDED watch event): its RayCluster created, the
RayCluster ready (KubeRay's ``state: ready``), the cluster ready as its controller sees it
(GRPORun ``ClusterReady=True``, written before the pass creates the driver's objects; RayJob
past ``Initializing``, written after KubeRay has created the submitter Job), and its driver pod
created by the Job controller (the same pod in both arms that start one: the milestone that
compares like with like). API requests are counted from the audit log by client identity, from
the first create until every run is seen ready and has its driver pod; memory is the peak RSS of
each controller's process tree, and the CPU time of the operator, the API server, etcd and
KubeRay, over the same window.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import yaml
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from bench import report
from bench.tables import MISSING, markdown_table, ratio, times
from demo import inputs
from grpo_operator.api.constants import GROUP, LABEL_RUN, PLURAL, VERSION
from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.children import identity
from grpo_operator.children.driver_job import driver_job
from grpo_operator.children.meta import RunRef
from grpo_operator.children.raycluster import ray_cluster
from localcluster import LocalCluster
from localcluster.audit import READS, read_requests_by_user
from localcluster.components import DRIVER_SELECTOR
from localcluster.nodes import GPU_POOL_LABEL, GPU_TAINT, cpu_nodes_for
from localcluster.operator_process import OperatorProcess
from localcluster.pki import COMPONENT_USERS
from localcluster.processes import cpu_seconds, tree_rss

RUNS = (50, 200, 1000)
GPUS_PER_NODE = 8  # localcluster.nodes.gpu_node's default
CRD = inputs.REPO / "crds" / "grporuns.grpo.dev.yaml"
OPERATOR_NAMESPACE, OPERATOR_ACCOUNT = "grpo-bench", "grpo-operator"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_ACCOUNT}"
KUBERAY_USER = COMPONENT_USERS["kuberay"][0]
RAYJOB_CLUSTER_LABEL = "ray.io/originated-from-cr-name"


def arm_timeout(runs: int) -> float:
    return 120 + 2.0 * runs


# -- what is applied ---------------------------------------------------------------------------


def grporun(name: str) -> dict:
    """The tiny example as a GPU run: one worker with one GPU on the GPU pool."""
    body = inputs.load_example()
    body["metadata"]["name"] = name
    resources = body["spec"]["resources"]
    resources["gpusPerWorker"] = 1
    resources["nodeSelector"] = {GPU_POOL_LABEL: "gpu"}
    resources["tolerations"] = [{"key": GPU_TAINT["key"], "operator": "Exists",
                                 "effect": GPU_TAINT["effect"]}]
    return body


def rayjob(name: str, namespace: str, mode: str) -> dict:
    """A RayJob whose cluster is the one the operator builds for ``grporun(name)``; in
    ``K8sJobMode`` its submitter pod is the operator's driver pod: KubeRay keeps a submitter
    container's own command (adding the dashboard address and job id to its environment), and
    the pod's labels leave it Pending in the bench as the operator's driver pods are."""
    spec = GRPORunSpec.model_validate(grporun(name)["spec"])
    run = RunRef(name, namespace, uid="")
    job_spec = {"submissionMode": mode, "rayClusterSpec": ray_cluster(spec, run)["spec"]}
    if mode == K8S_JOB_MODE:
        job_spec["submitterPodTemplate"] = driver_job(spec, run, attempt=1)["spec"]["template"]
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name},
            "spec": job_spec}


def rayjob_prerequisites(name: str, namespace: str) -> list[dict]:
    """The ServiceAccount and the auth Secret the RayJob's pods name (the operator's own
    builders, without the owner reference to a GRPORun that does not exist)."""
    run = RunRef(name, namespace, uid="")
    objects = [identity.service_account(run), identity.auth_secret(run, f"token-{name}")]
    for obj in objects:
        del obj["metadata"]["ownerReferences"]
    return objects


# -- observing ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """A kind of run and how to read its milestones."""

    controller: str
    group: str
    version: str
    plural: str
    cluster_label: str  # the RayCluster label that names its run
    ready: Callable[[dict], bool]  # the controller has seen its cluster ready
    starts_driver: bool  # a pod labelled as the operator's driver is created at readiness
    submission_mode: str = ""  # the RayJob's spec.submissionMode; empty for GRPORuns


def grporun_ready(obj: dict) -> bool:
    return any(c.get("type") == "ClusterReady" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def rayjob_ready(obj: dict) -> bool:
    return (obj.get("status") or {}).get("jobDeploymentStatus") in ("Waiting", "Running")


GRPORUNS = Kind("grpo-operator", GROUP, VERSION, PLURAL, LABEL_RUN, grporun_ready, True)
K8S_JOB_MODE, INTERACTIVE_MODE = "K8sJobMode", "InteractiveMode"
RAYJOBS = tuple(Kind(f"KubeRay RayJob ({mode})", "ray.io", "v1", "rayjobs", RAYJOB_CLUSTER_LABEL,
                     rayjob_ready, mode == K8S_JOB_MODE, mode)
                for mode in (K8S_JOB_MODE, INTERACTIVE_MODE))

MILESTONES = (("cluster_created", "RayCluster created"), ("cluster_ready", "RayCluster ready"),
              ("seen_ready", "ready, seen by the controller"),
              ("driver_created", "driver pod created"))


@dataclass
class Times:
    """When (wall clock) a run's milestones were first seen."""

    created: float | None = None
    cluster_created: float | None = None
    cluster_ready: float | None = None
    seen_ready: float | None = None
    driver_created: float | None = None


def all_reached(times: dict[str, Times], milestone: str) -> float | None:
    """Seconds from the first run's creation to the last run's ``milestone`` (how long the
    controllers took for the whole batch: per-run times hide how the batch was spread)."""
    created = [t.created for t in times.values() if t.created is not None]
    reached = [getattr(t, milestone) for t in times.values()]
    if not created or None in reached:
        return None
    return max(reached) - min(created)


def durations(times: dict[str, Times], milestone: str) -> list[float]:
    """Seconds from each run's creation to ``milestone``, for the runs that reached it."""
    return [getattr(t, milestone) - t.created for t in times.values()
            if t.created is not None and getattr(t, milestone) is not None]


class Timeline:
    """First sightings of each run's milestones in one namespace, from watches on the runs,
    on the RayClusters and on the driver pods."""

    def __init__(self, api: client.ApiClient, namespace: str, kind: Kind):
        custom = client.CustomObjectsApi(api)
        self.api, self.namespace, self.kind = api, namespace, kind
        self.times: dict[str, Times] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        lists = [
            (partial(custom.list_namespaced_custom_object, kind.group, kind.version, namespace,
                     kind.plural), self._on_run),
            (partial(custom.list_namespaced_custom_object, "ray.io", "v1", namespace,
                     "rayclusters"), self._on_cluster),
            (partial(client.CoreV1Api(api).list_namespaced_pod, namespace,
                     label_selector=DRIVER_SELECTOR), self._on_driver_pod),
        ]
        self._threads = [threading.Thread(target=self._follow, args=pair, daemon=True)
                         for pair in lists]

    def __enter__(self) -> Timeline:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(15)

    def seen_ready(self) -> int:
        with self._lock:
            return sum(t.seen_ready is not None for t in self.times.values())

    def done(self) -> int:
        """Runs seen ready and, where the kind starts one, with their driver pod."""
        with self._lock:
            return sum(t.seen_ready is not None
                       and (t.driver_created is not None or not self.kind.starts_driver)
                       for t in self.times.values())

    def clusters_created(self) -> int:
        with self._lock:
            return sum(t.cluster_created is not None for t in self.times.values())

    def _record(self, name: str, milestone: str) -> None:
        now = time.time()
        with self._lock:
            times = self.times.setdefault(name, Times())
            if getattr(times, milestone) is None:
                setattr(times, milestone, now)

    def _on_run(self, obj: dict) -> None:
        name = obj["metadata"]["name"]
        self._record(name, "created")
        if self.kind.ready(obj):
            self._record(name, "seen_ready")

    def _on_cluster(self, obj: dict) -> None:
        run = (obj["metadata"].get("labels") or {}).get(self.kind.cluster_label)
        if run is None:
            return
        self._record(run, "cluster_created")
        if (obj.get("status") or {}).get("state") == "ready":
            self._record(run, "cluster_ready")

    def _on_driver_pod(self, obj: dict) -> None:
        run = (obj["metadata"].get("labels") or {}).get(LABEL_RUN)
        if run is not None:
            self._record(run, "driver_created")

    def _follow(self, list_objects: Callable[..., object],
                on_object: Callable[[dict], None]) -> None:
        version_seen = None
        while not self._stop.is_set():
            try:
                if version_seen is None:
                    # Pods are listed as models, custom objects as dicts.
                    listing = self.api.sanitize_for_serialization(list_objects())
                    version_seen = listing["metadata"]["resourceVersion"]
                    for obj in listing["items"]:
                        on_object(obj)
                for event in watch.Watch().stream(list_objects, resource_version=version_seen,
                                                  timeout_seconds=5):
                    if event["type"] == "ERROR":  # e.g. 410: the version is too old
                        version_seen = None
                        break
                    obj = event["raw_object"]
                    version_seen = obj["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        on_object(obj)
            except ApiException as e:
                version_seen = None if e.status == 410 else version_seen
                time.sleep(0.2)
            except Exception:  # noqa: BLE001 - a dropped watch is taken up again
                time.sleep(0.2)


class PeakRss:
    """The highest resident memory of each source (a process tree) while the block runs."""

    def __init__(self, sources: dict[str, Callable[[], int]], every: float = 0.5):
        self.sources, self.every = sources, every
        self.peak = dict.fromkeys(sources, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            for name, rss in self.sources.items():
                self.peak[name] = max(self.peak[name], rss())
            if self._stop.wait(self.every):
                return

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)


# -- measuring ---------------------------------------------------------------------------------


@dataclass
class Arm:
    """One kind of run at one N: its milestones, requests by user, peak memory by process."""

    kind: Kind
    runs: int
    times: dict[str, Times]
    requests: Counter[str]
    reads: Counter[str]  # the requests that were gets and lists
    peak_rss: dict[str, int]
    cpu: dict[str, float]  # CPU seconds used in the window, by process
    seconds: float
    load: float = field(default_factory=lambda: os.getloadavg()[0])  # at the window's end


def _absent(read: Callable, *args) -> bool:
    try:
        read(*args)
    except ApiException as e:
        if e.status == 404:
            return True
        raise
    return False


def _until(done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} after {timeout:.0f}s")
        time.sleep(0.5)


def _fresh_namespace(core: client.CoreV1Api, name: str) -> None:
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    # Pods are admitted only once the namespace's default ServiceAccount exists.
    _until(lambda: not _absent(core.read_namespaced_service_account, "default", name), 30,
           f"no default ServiceAccount in {name}")


def operator_identity(cluster: LocalCluster, api: client.ApiClient) -> Path:
    """A kubeconfig of a ServiceAccount of the operator's own (cluster-admin: the bench counts
    requests, the chart's narrower grant is the tests' business)."""
    core = client.CoreV1Api(api)
    _fresh_namespace(core, OPERATOR_NAMESPACE)
    core.create_namespaced_service_account(OPERATOR_NAMESPACE, client.V1ServiceAccount(
        metadata=client.V1ObjectMeta(name=OPERATOR_ACCOUNT)))
    client.RbacAuthorizationV1Api(api).create_cluster_role_binding(client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name="grpo-bench-operator"),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole",
                                  name="cluster-admin"),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name=OPERATOR_ACCOUNT,
                                       namespace=OPERATOR_NAMESPACE)]))
    token = core.create_namespaced_service_account_token(
        OPERATOR_ACCOUNT, OPERATOR_NAMESPACE, client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=6 * 3600)),
    ).status.token
    return cluster.write_kubeconfig(cluster.root / "bench-operator.kubeconfig",
                                    user=OPERATOR_USER, token=token)


def _pid(cluster: LocalCluster, name: str) -> int:
    return next(p for p in cluster.supervisor.processes if p.name == name).popen.pid


def _kuberay_rss(cluster: LocalCluster) -> Callable[[], int]:
    pid = _pid(cluster, "kuberay-operator")
    return lambda: tree_rss(pid)


# Whose CPU time the window's row shows (the machine's other processes share the same cores).
CPU_OF = ("kube-apiserver", "etcd", "kuberay-operator")


def _apply_and_wait(cluster: LocalCluster, api: client.ApiClient, kind: Kind, namespace: str,
                    bodies: list[dict], rss: dict[str, Callable[[], int]],
                    progress: Callable[[str], None], operator_pid: int | None = None) -> Arm:
    """Create ``bodies`` at once; wait until every run's controller has seen its cluster
    ready (or the arm's time is up); measure the window."""
    runs = len(bodies)
    pids = {name: _pid(cluster, name) for name in CPU_OF}
    if operator_pid is not None:
        pids["operator"] = operator_pid
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    with Timeline(api, namespace, kind) as timeline, PeakRss(rss) as peak:
        since = time.time()
        cluster.kubectl("create", "-n", namespace, "-f", "-",
                        input=yaml.safe_dump_all(bodies), timeout=300)
        deadline = time.monotonic() + arm_timeout(runs)
        reported = -1
        while (done := timeline.done()) < runs and time.monotonic() < deadline:
            if done // 25 != reported // 25:
                progress(f"  {kind.controller}, N={runs}: {done}/{runs} done after "
                         f"{time.time() - since:.0f}s")
                reported = done
            time.sleep(0.5)
        until = time.time()
        cpu = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
    progress(f"  {kind.controller}, N={runs}: {timeline.done()}/{runs} done (seen ready"
             f"{', driver pod made' if kind.starts_driver else ''}) after {until - since:.0f}s")
    requests = read_requests_by_user(cluster.audit_log, since, until)
    reads = read_requests_by_user(cluster.audit_log, since, until, READS)
    return Arm(kind, runs, timeline.times, requests, reads, peak.peak, cpu, until - since)


def _delete_namespace(core: client.CoreV1Api, namespace: str) -> None:
    core.delete_namespace(namespace)
    _until(lambda: _absent(core.read_namespace, namespace), 600,
           f"namespace {namespace} still there")


def grporuns_arm(cluster: LocalCluster, api: client.ApiClient, kubeconfig: Path, runs: int,
                 progress: Callable[[str], None]) -> Arm:
    core, namespace = client.CoreV1Api(api), f"grporuns-{runs}"
    _fresh_namespace(core, namespace)
    bodies = [grporun(f"run-{i:03d}") for i in range(runs)]
    with OperatorProcess(cluster, cluster.root / f"operator-{runs}.log", kubeconfig=kubeconfig,
                         env=inputs.operator_settings(inputs.host_root(bodies[0]))) as operator:
        arm = _apply_and_wait(cluster, api, GRPORUNS, namespace, bodies,
                              {"operator": operator.rss, "kuberay": _kuberay_rss(cluster)},
                              progress, operator_pid=operator.proc.pid)
    _delete_namespace(core, namespace)
    return arm


def rayjobs_arm(cluster: LocalCluster, api: client.ApiClient, kind: Kind, runs: int,
                progress: Callable[[str], None]) -> Arm:
    core = client.CoreV1Api(api)
    namespace = f"rayjobs-{kind.submission_mode.lower()}-{runs}"
    _fresh_namespace(core, namespace)
    names = [f"run-{i:03d}" for i in range(runs)]
    prerequisites = [obj for name in names for obj in rayjob_prerequisites(name, namespace)]
    cluster.kubectl("create", "-n", namespace, "-f", "-",
                    input=yaml.safe_dump_all(prerequisites), timeout=300)
    arm = _apply_and_wait(cluster, api, kind, namespace,
                          [rayjob(name, namespace, kind.submission_mode) for name in names],
                          {"kuberay": _kuberay_rss(cluster)}, progress)
    _delete_namespace(core, namespace)
    return arm


def measure(runs: tuple[int, ...], progress: Callable[[str], None]) -> list[Arm]:
    """Both arms at each N, on one cluster sized for the largest N."""
    nodes = math.ceil(max(runs) / GPUS_PER_NODE) + 1
    progress(f"operator vs RayJob: starting a local cluster with {nodes} GPU nodes")
    arms: list[Arm] = []
    with LocalCluster.start(gpu_nodes=nodes, cpu_nodes=cpu_nodes_for(max(runs)),
                            run_driver_pods=False, keep_audit_log=True) as cluster:
        cluster.install_crd(CRD)
        api = cluster.api_client()
        try:
            kubeconfig = operator_identity(cluster, api)
            for n in runs:
                arms.append(grporuns_arm(cluster, api, kubeconfig, n, progress))
                arms.extend(rayjobs_arm(cluster, api, kind, n, progress) for kind in RAYJOBS)
        finally:
            api.close()
    return arms


# -- the section -------------------------------------------------------------------------------


def _mib(value: int | None) -> str:
    return report.number(value / 2**20, 0) if value else MISSING


def _p50_p95(values: list[float]) -> str:
    return f"{report.number(report.percentile(values, 50))} / " \
           f"{report.number(report.percentile(values, 95))}"


def _ratio_p50_p95(ours: Arm, theirs: Arm, milestone: str) -> str:
    ours_times, theirs_times = (durations(a.times, milestone) for a in (ours, theirs))
    return ", ".join(f"p{q} " + times(ratio(report.percentile(ours_times, q),
                                            report.percentile(theirs_times, q)))
                     for q in (50, 95))


def section(arms: list[Arm]) -> str:
    rows = []
    for arm in arms:
        reached = len(durations(arm.times, "seen_ready"))
        rows.append([
            str(arm.runs), arm.kind.controller, f"{reached}/{arm.runs}",
            *(_p50_p95(durations(arm.times, m)) for m, _ in MILESTONES),
            report.number(all_reached(arm.times, "seen_ready")),
            report.number(arm.requests[OPERATOR_USER] / arm.runs)
            if arm.kind is GRPORUNS else MISSING,
            report.number(arm.reads[OPERATOR_USER] / arm.runs)
            if arm.kind is GRPORUNS else MISSING,
            report.number(arm.requests[KUBERAY_USER] / arm.runs),
            _mib(arm.peak_rss.get("operator")), _mib(arm.peak_rss.get("kuberay")),
            *(report.number(arm.cpu[name], 0) if name in arm.cpu else MISSING
              for name in ("operator", *CPU_OF)),
            report.number(arm.seconds, 0), report.number(arm.load, 1),
        ])
    header = ["N", "controller", "ready", *(f"{label} p50 / p95 (s)" for _, label in MILESTONES),
              "all seen ready (s)",
              "requests/run: operator", "of which reads", "requests/run: KubeRay",
              "peak RSS operator (MiB)", "peak RSS KubeRay (MiB)",
              "CPU s: operator", "CPU s: API server", "CPU s: etcd", "CPU s: KubeRay",
              "window (s)", "load (1 min)"]
    ratios = []
    by_n: dict[int, dict[str, Arm]] = {}
    for arm in arms:
        by_n.setdefault(arm.runs, {})[arm.kind.controller] = arm
    for n, pair in by_n.items():
        ours = pair.get(GRPORUNS.controller)
        if ours is None:
            continue
        for theirs in filter(None, (pair.get(kind.controller) for kind in RAYJOBS)):
            compared = ["seen_ready", *(["driver_created"] if theirs.kind.starts_driver else [])]
            ratios.append(
                f"- N={n}, GRPORun ÷ RayJob in {theirs.kind.submission_mode}: "
                + "; ".join(f"{dict(MILESTONES)[m]} {_ratio_p50_p95(ours, theirs, m)}"
                            for m in compared)
                + "; API requests per run (operator + KubeRay vs KubeRay) "
                + times(ratio(ours.requests[OPERATOR_USER] + ours.requests[KUBERAY_USER],
                              theirs.requests[KUBERAY_USER]))
            )
    return "\n\n".join([
        "## Operator vs KubeRay's RayJob controller",
        "N runs created at once (one `kubectl create`) on the local control plane, enough fake "
        f"{GPUS_PER_NODE}-GPU KWOK nodes for all of them and CPU nodes with room for every "
        "driver pod, driver pods left Pending (nothing trains). GRPORuns: the tiny example "
        "with one 1-GPU worker, served by the operator "
        "(cluster-wide, default settings). RayJobs: the same RayCluster spec, as the operator's "
        "builder makes it, served by the KubeRay operator alone, in `K8sJobMode` (RayJob's "
        "default: once the cluster is ready KubeRay creates a submitter Job whose pod is the "
        "operator's driver pod, left Pending too) and in `InteractiveMode` (KubeRay starts "
        "nothing once the cluster is ready). Times are from each run's creation; *RayCluster "
        "ready* is KubeRay's `state: ready`; *ready, seen by the controller* is the GRPORun's "
        "`ClusterReady=True` (the operator reads it from the Ray pods by KubeRay's rule, so it "
        "may come before KubeRay's `state: ready`; written before its pass creates the driver's "
        "objects) "
        "or the RayJob leaving `Initializing` (`Running` once KubeRay has created the submitter "
        "Job, `Waiting` in `InteractiveMode`); *driver pod created* is the driver's (or "
        "submitter's) pod made by the Job controller, the same pod in both arms that start one, "
        "so the milestone that compares like with like; *all seen ready* is from the first "
        "run's creation to the last run seen ready. A `Running` RayJob polls its head's "
        "dashboard for the job, which KWOK's heads do not serve: each poll fails at once and "
        "KubeRay retries it with its error back-off (5 ms doubling per failure), the path a "
        "real head's answer also takes until the submitter has submitted (the job unknown); "
        "once it has, a real head would bring a poll every 3 s, so later in the window the "
        "RayJob arms carry fewer polls here than on a real cluster. Requests: the API server's "
        "audit log, by client identity, from the first create until every run is seen ready and "
        "has its driver pod (KubeRay reconciles the RayClusters of both arms); reads are its "
        "gets and lists (watches are per process, not per run). Peak RSS of each controller's "
        "process tree, and CPU seconds of the operator, the API server, etcd and KubeRay, over "
        "the same window (all share the machine's cores).",
        markdown_table(header, rows),
        "\n".join(ratios),
    ]).strip()


def sections(progress: Callable[[str], None], runs: tuple[int, ...] = RUNS) -> list[str]:
    return [section(measure(runs, progress))]
