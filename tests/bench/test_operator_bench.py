"""The operator benchmark's pure parts: what it applies, how it reads milestones, how it counts
requests from the audit log, and its section."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from kubernetes.client import ApiClient
from kubernetes.utils import parse_quantity

from bench import operator_vs_rayjob as bench
from grpo_operator.api.constants import LABEL_RUN
from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.children.meta import RunRef
from grpo_operator.children.raycluster import ray_cluster
from localcluster.audit import READS, requests_by_user
from localcluster.components import DRIVER_SELECTOR
from localcluster.nodes import cpu_nodes_for, default_nodes


def _event(audit_id: str, user: str, at: str, stage: str = "ResponseComplete",
           verb: str = "create") -> str:
    return json.dumps({"kind": "Event", "auditID": audit_id, "stage": stage, "verb": verb,
                       "user": {"username": user}, "requestReceivedTimestamp": at})


def test_requests_are_counted_once_per_audit_id_within_the_window():
    lines = [
        _event("a", "op", "2026-01-01T00:00:01.000000Z"),
        _event("w", "op", "2026-01-01T00:00:02.000000Z", stage="ResponseStarted",
               verb="watch"),
        _event("b", "kuberay", "2026-01-01T00:00:03.500000Z"),
        "",
        _event("w", "op", "2026-01-01T00:00:02.000000Z", verb="watch"),  # the same request
        _event("g", "op", "2026-01-01T00:00:04.000000Z", verb="get"),
        _event("late", "op", "2026-01-01T00:00:09.000000Z"),
        _event("early", "op", "2025-12-31T23:59:59.000000Z"),
    ]
    start = 1767225600.0  # 2026-01-01T00:00:00Z
    assert requests_by_user(lines, start, start + 5) == Counter({"op": 3, "kuberay": 1})
    assert requests_by_user(lines, start, start + 5, READS) == Counter({"op": 1})


@pytest.mark.parametrize("mode", ["K8sJobMode", "InteractiveMode"])
def test_a_rayjob_asks_for_the_cluster_the_operator_builds(mode):
    job = bench.rayjob("run-007", "ns", mode)
    spec = GRPORunSpec.model_validate(bench.grporun("run-007")["spec"])
    assert job["spec"]["rayClusterSpec"] == ray_cluster(spec, RunRef("run-007", "ns", ""))["spec"]
    assert job["spec"]["submissionMode"] == mode
    assert job["metadata"] == {"name": "run-007"}
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert worker["nodeSelector"] == {"grpo.dev/node-pool": "gpu"}


def _selects(selector: str, labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value
               for key, value in (term.split("=") for term in selector.split(",")))


def test_a_submitting_rayjob_starts_the_operators_driver_pod_and_an_interactive_one_nothing():
    submitter = bench.rayjob("run-007", "ns", "K8sJobMode")["spec"]["submitterPodTemplate"]
    labels = submitter["metadata"]["labels"]
    # Left Pending as the operator's driver pods are, and found by the bench's driver watch.
    assert _selects(DRIVER_SELECTOR, labels) and labels[LABEL_RUN] == "run-007"
    container = submitter["spec"]["containers"][0]
    # KubeRay keeps a submitter's own command: the pod runs what the operator's driver runs.
    assert container["command"][:4] == ["python", "-m", "grpo_trainer", "submit"]
    assert submitter["spec"]["serviceAccountName"] == "run-007-trainer"
    assert "submitterPodTemplate" not in bench.rayjob("run-007", "ns", "InteractiveMode")["spec"]


def test_a_run_is_done_once_seen_ready_and_with_its_driver_pod_where_its_kind_starts_one():
    ready = {"status": {"conditions": [{"type": "ClusterReady", "status": "True"}]}}
    operator = bench.Timeline(ApiClient(), "ns", bench.GRPORUNS)
    operator._on_run({"metadata": {"name": "a"}, **ready})
    operator._on_run({"metadata": {"name": "b"}, **ready})
    operator._on_driver_pod({"metadata": {"labels": {LABEL_RUN: "a"}}})
    operator._on_driver_pod({"metadata": {"labels": {}}})  # not a run's: ignored
    assert (operator.seen_ready(), operator.done()) == (2, 1)
    assert operator.times["a"].driver_created is not None
    interactive = bench.Timeline(ApiClient(), "ns", bench.RAYJOBS[1])
    interactive._on_run({"metadata": {"name": "a"}, "status": {"jobDeploymentStatus": "Waiting"}})
    assert interactive.done() == 1


def test_what_a_rayjob_user_provides_is_owned_by_no_grporun():
    made = bench.rayjob_prerequisites("run-007", "ns")
    assert [(o["kind"], o["metadata"]["name"]) for o in made] == [
        ("ServiceAccount", "run-007-trainer"), ("Secret", "run-007-ray-auth")]
    assert all("ownerReferences" not in o["metadata"] for o in made)


def test_readiness_as_each_controller_records_it():
    condition = {"type": "ClusterReady", "status": "True"}
    assert bench.grporun_ready({"status": {"conditions": [condition]}})
    assert not bench.grporun_ready({"status": {"conditions": [{**condition, "status": "False"}]}})
    assert not bench.grporun_ready({})
    assert bench.rayjob_ready({"status": {"jobDeploymentStatus": "Waiting"}})
    assert not bench.rayjob_ready({"status": {"jobDeploymentStatus": "Initializing"}})
    assert not bench.rayjob_ready({})


def test_durations_count_from_creation_and_skip_what_was_not_reached():
    times = {"a": bench.Times(created=10, cluster_created=11, seen_ready=13),
             "b": bench.Times(created=20, cluster_created=24),
             "c": bench.Times(cluster_created=5)}
    assert sorted(bench.durations(times, "cluster_created")) == [1, 4]
    assert bench.durations(times, "seen_ready") == [3]
    # The whole batch: from the first creation to the last milestone, once every run has it.
    assert bench.all_reached(times, "cluster_created") == 14
    assert bench.all_reached(times, "seen_ready") is None


def _arm(kind, runs, ready_after, requests, rss, reads=None, cpu=None, driver_after=None):
    times = {f"r{i}": bench.Times(created=0.0, cluster_created=ready_after / 2,
                                  cluster_ready=ready_after, seen_ready=ready_after,
                                  driver_created=driver_after)
             for i in range(runs)}
    return bench.Arm(kind, runs, times, Counter(requests), Counter(reads or {}), rss,
                     cpu or {}, seconds=30, load=1.5)


def test_the_section_tabulates_both_arms_and_their_ratios():
    arms = [
        _arm(bench.GRPORUNS, 4, 3.0, {bench.OPERATOR_USER: 40, bench.KUBERAY_USER: 20},
             {"operator": 100 * 2**20, "kuberay": 50 * 2**20}, {bench.OPERATOR_USER: 2},
             {"operator": 12.0, "kube-apiserver": 20.4, "etcd": 3.0, "kuberay-operator": 5.0},
             driver_after=3.5),
        _arm(bench.RAYJOBS[0], 4, 2.5, {bench.KUBERAY_USER: 40}, {"kuberay": 60 * 2**20},
             cpu={"kube-apiserver": 10.0, "etcd": 2.0, "kuberay-operator": 6.0},
             driver_after=7.0),
        _arm(bench.RAYJOBS[1], 4, 2.0, {bench.KUBERAY_USER: 30}, {"kuberay": 60 * 2**20},
             cpu={"kube-apiserver": 10.0, "etcd": 2.0, "kuberay-operator": 6.0}),
    ]
    text = bench.section(arms)
    rows = [line for line in text.splitlines() if line.startswith("| 4 ")]
    assert rows == [
        "| 4 | grpo-operator | 4/4 | 1.5 / 1.5 | 3.0 / 3.0 | 3.0 / 3.0 | 3.5 / 3.5 | 3.0 | 10.0 "
        "| 0.5 | 5.0 | 100 | 50 | 12 | 20 | 3 | 5 | 30 | 1.5 |",
        "| 4 | KubeRay RayJob (K8sJobMode) | 4/4 | 1.2 / 1.2 | 2.5 / 2.5 | 2.5 / 2.5 | 7.0 / 7.0 "
        "| 2.5 | – | – | 10.0 | – | 60 | – | 10 | 2 | 6 | 30 | 1.5 |",
        "| 4 | KubeRay RayJob (InteractiveMode) | 4/4 | 1.0 / 1.0 | 2.0 / 2.0 | 2.0 / 2.0 | – / – "
        "| 2.0 | – | – | 7.5 | – | 60 | – | 10 | 2 | 6 | 30 | 1.5 |",
    ]
    assert ("- N=4, GRPORun ÷ RayJob in K8sJobMode: ready, seen by the controller p50 1.20×, "
            "p95 1.20×; driver pod created p50 0.50×, p95 0.50×; API requests per run "
            "(operator + KubeRay vs KubeRay) 1.50×") in text
    assert ("- N=4, GRPORun ÷ RayJob in InteractiveMode: ready, seen by the controller p50 "
            "1.50×, p95 1.50×; API requests per run (operator + KubeRay vs KubeRay) 2.00×") in text


@pytest.mark.parametrize("runs", [1, 50, 110, 111, 200, 1000])
def test_the_cpu_pool_takes_every_driver_of_a_batch(runs):
    """A driver pod the pool has no room for is unschedulable, and the operator warns of it
    with an Event and a status write: costs of the harness, not of the operator's batch."""
    pool = default_nodes(gpu_nodes=0, cpu_nodes=cpu_nodes_for(runs))
    driver = bench.grporun("run")["spec"]["resources"]["driver"]
    for resource, per_driver in (("pods", 1), ("cpu", driver["cpu"]),
                                 ("memory", driver["memory"])):
        room = sum(parse_quantity(n["status"]["allocatable"][resource]) // parse_quantity(
            per_driver) for n in pool)
        assert room >= runs, resource
