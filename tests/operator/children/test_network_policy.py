"""The run's NetworkPolicy as the builder makes it (pure, no cluster): it selects the pods the
run's RayCluster and driver Job builders label, admits the run's own Ray pods on every port and
its driver on the Jobs API port only, leaves egress alone, and is owned by the run."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grpo_operator.api.constants import (
    API_VERSION,
    KIND,
    LABEL_ROLE,
    LABEL_RUN,
    MAX_CHILD_SUFFIX_LENGTH,
    MAX_RUN_NAME_LENGTH,
    ROLE_DRIVER,
)
from grpo_operator.api.ray_job import DASHBOARD_PORT
from grpo_operator.api.spec import validate_manifest
from grpo_operator.children.driver_job import driver_job
from grpo_operator.children.meta import RunRef
from grpo_operator.children.network_policy import (
    RAY_METRICS_PORT,
    MetricsScrapers,
    network_policy,
)
from grpo_operator.children.raycluster import ray_cluster
from grpo_operator.naming import ChildNames

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "tiny-cpu.yaml"
RUN = RunRef("tiny-cpu", "team-a", "uid-1")


def matches(selector: dict, labels: dict[str, str]) -> bool:
    """A LabelSelector's meaning, for the operators the builder uses."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        assert expr["operator"] == "In", expr
        if labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def ray_pod_labels(run: RunRef) -> list[dict[str, str]]:
    """The labels of the run's Ray pods: the builder's template labels plus the
    ``ray.io/cluster`` KubeRay adds (the cluster test checks this against KubeRay itself)."""
    spec = validate_manifest(yaml.safe_load(EXAMPLE.read_text())).spec
    rc = ray_cluster(spec, run)["spec"]
    templates = [rc["headGroupSpec"]["template"]] + [
        g["template"] for g in rc["workerGroupSpecs"]]
    return [{**t["metadata"]["labels"], "ray.io/cluster": run.name} for t in templates]


def driver_pod_labels(run: RunRef, attempt: int = 1) -> dict[str, str]:
    spec = validate_manifest(yaml.safe_load(EXAMPLE.read_text())).spec
    return driver_job(spec, run, attempt)["spec"]["template"]["metadata"]["labels"]


def test_it_selects_the_runs_ray_pods_and_not_its_driver_nor_another_runs():
    selector = network_policy(RUN)["spec"]["podSelector"]
    head, worker = ray_pod_labels(RUN)
    assert matches(selector, head) and matches(selector, worker)
    assert not matches(selector, driver_pod_labels(RUN))
    for pod in ray_pod_labels(RunRef("tiny-cpu-2", RUN.namespace, "uid-2")):
        assert not matches(selector, pod)


def test_ray_pods_are_admitted_on_every_port_and_the_driver_on_the_jobs_api_only():
    spec = network_policy(RUN)["spec"]
    assert spec["policyTypes"] == ["Ingress"]  # egress unrestricted
    ray_rule, driver_rule = spec["ingress"]
    [ray_peer] = ray_rule["from"]
    assert set(ray_peer) == {"podSelector"}  # the policy's own namespace only
    assert "ports" not in ray_rule
    assert all(matches(ray_peer["podSelector"], labels) for labels in ray_pod_labels(RUN))
    assert not matches(ray_peer["podSelector"], driver_pod_labels(RUN))

    [driver_peer] = driver_rule["from"]
    assert set(driver_peer) == {"podSelector"}
    assert driver_rule["ports"] == [{"protocol": "TCP", "port": DASHBOARD_PORT}]
    for attempt in (1, 2, 9999):
        assert matches(driver_peer["podSelector"], driver_pod_labels(RUN, attempt))
    assert not matches(driver_peer["podSelector"],
                       driver_pod_labels(RunRef("tiny-cpu-2", RUN.namespace, "uid-2")))
    assert not any(matches(driver_peer["podSelector"], labels)
                   for labels in ray_pod_labels(RUN))
    assert driver_peer["podSelector"]["matchLabels"] == {LABEL_RUN: RUN.name,
                                                         LABEL_ROLE: ROLE_DRIVER}


def test_it_is_owned_by_the_run_and_named_after_it():
    policy = network_policy(RUN)
    meta = policy["metadata"]
    assert (policy["apiVersion"], policy["kind"]) == ("networking.k8s.io/v1", "NetworkPolicy")
    assert (meta["name"], meta["namespace"]) == (ChildNames(RUN.name).network_policy, "team-a")
    [owner] = meta["ownerReferences"]
    assert (owner["apiVersion"], owner["kind"], owner["name"], owner["uid"]) == (
        API_VERSION, KIND, RUN.name, RUN.uid)
    assert owner["controller"] is True
    assert meta["labels"][LABEL_RUN] == RUN.name


def test_its_name_fits_for_the_longest_run_name():
    suffix = ChildNames("").network_policy
    assert len(suffix) <= MAX_CHILD_SUFFIX_LENGTH
    assert len(ChildNames("r" * MAX_RUN_NAME_LENGTH).network_policy) <= 63


def test_metrics_scrapers_are_admitted_on_the_metrics_port_only_when_set():
    assert len(network_policy(RUN)["spec"]["ingress"]) == 2
    scrapers = MetricsScrapers({"kubernetes.io/metadata.name": "monitoring"},
                               {"app.kubernetes.io/name": "prometheus"})
    rule = network_policy(RUN, scrapers)["spec"]["ingress"][2]
    assert rule == {
        "from": [{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }],
        "ports": [{"protocol": "TCP", "port": RAY_METRICS_PORT}],
    }


@pytest.mark.parametrize(("namespaces", "pods"), [({}, {"app": "prometheus"}),
                                                  ({"team": "monitoring"}, {})])
def test_metrics_scrapers_without_a_selector_are_refused(namespaces, pods):
    # An empty selector would admit every pod (or every namespace) to the metrics port.
    with pytest.raises(ValueError, match="both namespace labels and pod labels"):
        MetricsScrapers(namespaces, pods)
