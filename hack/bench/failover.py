"""The operator's leader killed while it provisions N runs: how long until the stand-by leads
and has reconciled every run again, and whether anything was made twice.

Two replicas with leader election (the chart's default lease), as one ServiceAccount; N runs
created at once; the leader SIGKILLed (a node loss) once a third of their RayClusters exist.
Measured from the kill: the stand-by holding the Lease; the stand-by having passed over every
run (its ``grpo_runs`` gauge, by phase, sums to N: a run is counted there from its first pass);
every run's cluster seen ready. Duplicates: RayClusters per run, driver Jobs per run, runs past
their first attempt.
"""

from __future__ import annotations

import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from bench import report
from bench.operator_vs_rayjob import (
    CRD,
    GPUS_PER_NODE,
    GRPORUNS,
    OPERATOR_NAMESPACE,
    Timeline,
    _fresh_namespace,
    _until,
    grporun,
    operator_identity,
)
from bench.tables import MISSING, markdown_table
from demo import inputs
from grpo_operator.api.constants import GROUP, LABEL_RUN, PLURAL, VERSION
from localcluster import LocalCluster
from localcluster.nodes import cpu_nodes_for
from localcluster.operator_process import OperatorProcess
from localcluster.processes import free_port

LEASE_SECONDS = 15  # the chart's leaderElection.leaseSeconds
LEASE_NAME = "grpo-bench-leader"
KILL_AT = 1 / 3  # of the runs' RayClusters created
RUNS = 200


@dataclass
class Failover:
    runs: int
    clusters_at_kill: int
    takeover: float | None
    reconciled: float | None
    all_ready: float | None
    most_clusters_per_run: int
    most_jobs_per_run: int
    later_attempts: int


def _runs_passed(port: int) -> int:
    """Runs the replica serving /metrics on ``port`` has passed over (0 if it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return 0
    return int(sum(s.value for family in text_string_to_metric_families(text)
                   if family.name == "grpo_runs" for s in family.samples))


def _most_per_run(labels: list[dict[str, str] | None]) -> int:
    """The most objects one run has, from the objects' labels."""
    counts = Counter(run for run in ((ls or {}).get(LABEL_RUN) for ls in labels) if run)
    return max(counts.values(), default=0)


def _kill_the_leader(cluster: LocalCluster, api: client.ApiClient, kubeconfig: Path,
                     namespace: str, bodies: list[dict], timeline: Timeline,
                     progress: Callable[[str], None]) -> Failover:
    runs, lease_namespace = len(bodies), OPERATOR_NAMESPACE
    leases = client.CoordinationV1Api(api)

    def holder() -> str | None:
        try:
            return leases.read_namespaced_lease(LEASE_NAME, lease_namespace).spec.holder_identity
        except client.ApiException:
            return None

    replicas = []
    for name in ("replica-a", "replica-b"):
        port = free_port()
        env = {**inputs.operator_settings(inputs.host_root(bodies[0])),
               "GRPO_LEADER_ELECTION": "true", "GRPO_LEASE_NAME": LEASE_NAME,
               "GRPO_LEASE_SECONDS": str(LEASE_SECONDS), "GRPO_NAMESPACE": lease_namespace,
               "GRPO_METRICS_PORT": str(port)}
        replicas.append((OperatorProcess(cluster, cluster.root / f"failover-{name}.log",
                                         kubeconfig=kubeconfig, env=env), port))
    try:
        for replica, _ in replicas:
            replica.start()
        _until(lambda: holder() in {r.identity for r, _ in replicas}, 60, "no leader")
        cluster.kubectl("create", "-n", namespace, "-f", "-",
                        input=yaml.safe_dump_all(bodies), timeout=300)

        _until(lambda: timeline.clusters_created() >= runs * KILL_AT, 600,
               "RayClusters not created")
        leader, _ = next((r, p) for r, p in replicas if r.identity == holder())
        standby, port = next((r, p) for r, p in replicas if r is not leader)
        at_kill = timeline.clusters_created()
        leader.kill()
        killed = time.monotonic()
        progress(f"  failover, N={runs}: leader killed with {at_kill}/{runs} RayClusters made")
        takeover = reconciled = all_ready = None
        deadline = killed + 120 + 2.0 * runs
        while time.monotonic() < deadline and all_ready is None:
            now = time.monotonic() - killed
            if takeover is None and holder() == standby.identity:
                takeover = now
            if takeover is not None and reconciled is None and _runs_passed(port) >= runs:
                reconciled = now
            if timeline.seen_ready() >= runs:
                all_ready = now
            time.sleep(0.5)
        rayclusters = client.CustomObjectsApi(api).list_namespaced_custom_object(
            "ray.io", "v1", namespace, "rayclusters")["items"]
        jobs = client.BatchV1Api(api).list_namespaced_job(namespace).items
        grporuns = client.CustomObjectsApi(api).list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL)["items"]
    finally:
        for replica, _ in replicas:
            replica.stop()
    later = sum(((r.get("status") or {}).get("recovery") or {}).get("attempt", 1) > 1
                for r in grporuns)
    return Failover(runs, at_kill, takeover, reconciled, all_ready,
                    _most_per_run([rc["metadata"].get("labels") for rc in rayclusters]),
                    _most_per_run([job.metadata.labels for job in jobs]), later)


def measure(runs: int, progress: Callable[[str], None]) -> Failover:
    nodes = runs // GPUS_PER_NODE + 2
    progress(f"failover: starting a local cluster with {nodes} GPU nodes")
    with LocalCluster.start(gpu_nodes=nodes, cpu_nodes=cpu_nodes_for(runs),
                            run_driver_pods=False) as cluster:
        cluster.install_crd(CRD)
        api = cluster.api_client()
        try:
            kubeconfig = operator_identity(cluster, api)
            namespace = f"failover-{runs}"
            _fresh_namespace(client.CoreV1Api(api), namespace)
            bodies = [grporun(f"run-{i:03d}") for i in range(runs)]
            with Timeline(api, namespace, GRPORUNS) as timeline:
                return _kill_the_leader(cluster, api, kubeconfig, namespace, bodies, timeline,
                                        progress)
        finally:
            api.close()


def _seconds(value: float | None) -> str:
    return report.number(value) if value is not None else MISSING


def section(f: Failover) -> str:
    header = ["N", "RayClusters made at the kill", "stand-by leads (s)",
              "every run reconciled again (s)", "every cluster ready (s)",
              "most RayClusters per run", "most driver Jobs per run", "runs past attempt 1"]
    row = [str(f.runs), f"{f.clusters_at_kill}/{f.runs}", _seconds(f.takeover),
           _seconds(f.reconciled), _seconds(f.all_ready), str(f.most_clusters_per_run),
           str(f.most_jobs_per_run), str(f.later_attempts)]
    return "\n\n".join([
        "## Leader killed mid-provisioning",
        f"Two operator replicas with leader election (`leaseSeconds: {LEASE_SECONDS}`, the "
        f"chart's default), N runs created at once as in the section above; the leader "
        f"SIGKILLed once {KILL_AT:.0%} of the runs' RayClusters exist. Seconds from the kill: "
        "the stand-by holding the Lease; the stand-by having passed over every run (its "
        "`grpo_runs` gauge counts a run from its first pass); every run's `ClusterReady`. "
        "Then what exists: RayClusters and driver Jobs per run (one each is right), runs past "
        "their first attempt (none is).",
        markdown_table(header, [row]),
    ])


def sections(progress: Callable[[str], None], runs: int = RUNS) -> list[str]:
    return [section(measure(runs, progress))]
