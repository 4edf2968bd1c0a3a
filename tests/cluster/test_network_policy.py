"""The run's NetworkPolicy against the API server's own label selection: which pods it isolates
and which it admits, among the run's pods as KubeRay and the builders label them, another run's
pods, the same run name's pods in another namespace, and unrelated pods.

No NetworkPolicy engine runs in the local cluster, so this checks what the policy's selectors
pick, not that a CNI enforces them. Every pod stays Pending (its nodeSelector names a pool no
node has), so neither KWOK nor the harness runs any of them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, dynamic

from grpo_operator.api.ray_job import DASHBOARD_PORT
from grpo_operator.api.spec import GRPORunSpec, validate_manifest
from grpo_operator.children import identity
from grpo_operator.children.driver_job import driver_job
from grpo_operator.children.meta import RunRef
from grpo_operator.children.network_policy import (
    RAY_METRICS_PORT,
    MetricsScrapers,
    network_policy,
)
from grpo_operator.children.raycluster import ray_cluster
from grpo_operator.naming import ChildNames
from tests.conftest import delete_namespace, new_namespace
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny-cpu.yaml"
NOWHERE = {"grpo.dev/node-pool": "nowhere"}
SCRAPER_LABELS = {"app.kubernetes.io/name": "prometheus"}
ALL_PORTS = "all"

Pod = tuple[str, str]  # (namespace, name)


def unowned(obj: dict[str, Any]) -> dict[str, Any]:
    """The child without its ownerReference: these runs are RunRefs with no GRPORun behind
    them, whose children the garbage collector would otherwise delete."""
    obj["metadata"].pop("ownerReferences")
    return obj


def pending(pod_spec: dict[str, Any]) -> dict[str, Any]:
    return {**pod_spec, "nodeSelector": NOWHERE}


def selector_string(selector: dict[str, Any]) -> str:
    """A LabelSelector as the ``labelSelector`` query parameter spells it."""
    parts = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        key, op = expr["key"], expr["operator"]
        if op in ("In", "NotIn"):
            parts.append(f"{key} {op.lower()} ({','.join(expr['values'])})")
        elif op == "Exists":
            parts.append(key)
        else:
            parts.append(f"!{key}")
    return ",".join(parts)


def pods_selected(core: client.CoreV1Api, namespaces: list[str],
                  selector: dict[str, Any]) -> set[Pod]:
    return {(ns, p.metadata.name) for ns in namespaces
            for p in core.list_namespaced_pod(ns, label_selector=selector_string(selector)).items}


def isolated(core: client.CoreV1Api, policy: dict[str, Any]) -> set[Pod]:
    meta = policy["metadata"]
    return pods_selected(core, [meta["namespace"]], policy["spec"]["podSelector"])


def admitted(core: client.CoreV1Api, policy: dict[str, Any]) -> dict[Pod, Any]:
    """Each pod some ingress rule admits, with the ports it may reach (``ALL_PORTS``, or a set
    of (protocol, port)), resolved as NetworkPolicy peers are: a peer without a
    namespaceSelector stands for the policy's own namespace."""
    result: dict[Pod, Any] = {}
    for rule in policy["spec"].get("ingress") or []:
        ports = ALL_PORTS if not rule.get("ports") else {
            (p["protocol"], p["port"]) for p in rule["ports"]}
        for peer in rule["from"]:
            assert "ipBlock" not in peer, peer
            if "namespaceSelector" in peer:
                namespaces = [n.metadata.name for n in core.list_namespace(
                    label_selector=selector_string(peer["namespaceSelector"])).items]
            else:
                namespaces = [policy["metadata"]["namespace"]]
            for pod in pods_selected(core, namespaces, peer.get("podSelector") or {}):
                before = result.get(pod, set())
                result[pod] = ALL_PORTS if ALL_PORTS in (before, ports) else before | ports
    return result


@dataclass
class RunPods:
    ray: set[Pod]
    drivers: set[Pod]


@dataclass
class World:
    core: client.CoreV1Api
    dyn: dynamic.DynamicClient
    monitoring: str
    run: RunRef
    ours: RunPods
    other_run: RunPods
    same_name_elsewhere: RunPods
    bystanders: set[Pod]
    scraper: Pod
    scraper_elsewhere: Pod

    def create_policy(self, policy: dict[str, Any]) -> dict[str, Any]:
        """As the API server stores it (strict field validation: every field is known)."""
        resource = self.dyn.resources.get(api_version="networking.k8s.io/v1",
                                          kind="NetworkPolicy")
        return resource.create(body=unowned(policy), namespace=policy["metadata"]["namespace"],
                               field_validation="Strict").to_dict()


def make_run(core: client.CoreV1Api, dyn: dynamic.DynamicClient, spec: GRPORunSpec,
             run: RunRef) -> RunPods:
    """The run's identity, its RayCluster (whose pods KubeRay makes and labels) and a driver
    pod for each of two attempts, built from the driver Job's pod template."""
    for obj in (identity.service_account(run), identity.auth_secret(run, "token")):
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        resource.create(body=unowned(obj), namespace=run.namespace)
    rc = unowned(ray_cluster(spec, run))
    for template in [rc["spec"]["headGroupSpec"]["template"]] + [
            g["template"] for g in rc["spec"]["workerGroupSpecs"]]:
        template["spec"] = pending(template["spec"])
    created = dyn.resources.get(api_version="ray.io/v1", kind="RayCluster").create(
        body=rc, namespace=run.namespace)
    drivers = set()
    for attempt in (1, 2):
        template = driver_job(spec, run, attempt)["spec"]["template"]
        pod = core.create_namespaced_pod(run.namespace, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": f"{ChildNames(run.name).driver_job(attempt)}-",
                         "labels": template["metadata"]["labels"]},
            "spec": pending(template["spec"]),
        })
        drivers.add((run.namespace, pod.metadata.name))
    want = 1 + sum(g["replicas"] for g in rc["spec"]["workerGroupSpecs"])

    def ray_pods() -> set[Pod] | None:
        # By owner, not by label: the labels are what is under test.
        owned = {(run.namespace, p.metadata.name)
                 for p in core.list_namespaced_pod(run.namespace).items
                 if any(o.uid == created.metadata.uid for o in p.metadata.owner_references or [])}
        return owned if len(owned) == want else None

    ray = wait_for(ray_pods, 60, what=f"KubeRay's {want} pods of {run.namespace}/{run.name}")
    return RunPods(ray, drivers)


def plain_pod(core: client.CoreV1Api, namespace: str, labels: dict[str, str]) -> Pod:
    pod = core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "bystander-", "labels": labels},
        "spec": pending({"containers": [{"name": "c", "image": "busybox"}]}),
    })
    return namespace, pod.metadata.name


@pytest.fixture(scope="module")
def world(k8s_api) -> Iterator[World]:
    core, dyn = client.CoreV1Api(k8s_api), dynamic.DynamicClient(k8s_api)
    spec = validate_manifest(yaml.safe_load(EXAMPLE.read_text())).spec
    home, elsewhere, monitoring = (new_namespace(k8s_api, p)
                                   for p in ("netpol", "netpol-b", "netpol-mon"))
    try:
        run = RunRef("train", home, str(uuid.uuid4()))
        ours = make_run(core, dyn, spec, run)
        other_run = make_run(core, dyn, spec, RunRef("train-2", home, str(uuid.uuid4())))
        same_name = make_run(core, dyn, spec, RunRef("train", elsewhere, str(uuid.uuid4())))
        bystanders = {plain_pod(core, home, {}),
                      # a driver of no run, and a Ray pod of no cluster
                      plain_pod(core, home, {"grpo.dev/role": "driver"}),
                      plain_pod(core, home, {"grpo.dev/role": "ray-head"}),
                      # the cluster's label on a pod that is no Ray node of it
                      plain_pod(core, home, {"ray.io/cluster": run.name})}
        scraper = plain_pod(core, monitoring, SCRAPER_LABELS)
        bystanders.add(plain_pod(core, monitoring, {}))
        scraper_elsewhere = plain_pod(core, elsewhere, SCRAPER_LABELS)
        yield World(core, dyn, monitoring, run, ours, other_run, same_name, bystanders,
                    scraper, scraper_elsewhere)
    finally:
        for ns in (home, elsewhere, monitoring):
            delete_namespace(k8s_api, ns)


def test_the_policy_isolates_exactly_the_runs_ray_pods(world):
    policy = world.create_policy(network_policy(world.run))
    assert policy["metadata"]["name"] == ChildNames(world.run.name).network_policy
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert isolated(world.core, policy) == world.ours.ray


def test_it_admits_the_runs_ray_pods_on_every_port_and_its_drivers_on_the_jobs_api(world):
    policy = world.create_policy(rename(network_policy(world.run), "-admits"))
    admits = admitted(world.core, policy)
    assert admits == expected_admitted(world)
    # Spelled out, what the equality above already refuses.
    for outsider in (world.other_run.ray | world.other_run.drivers
                     | world.same_name_elsewhere.ray | world.same_name_elsewhere.drivers
                     | world.bystanders | {world.scraper, world.scraper_elsewhere}):
        assert outsider not in admits, outsider


def test_metrics_scrapers_are_admitted_from_their_namespace_to_the_metrics_port(world):
    scrapers = MetricsScrapers({"kubernetes.io/metadata.name": world.monitoring}, SCRAPER_LABELS)
    policy = world.create_policy(rename(network_policy(world.run, scrapers), "-metrics"))
    assert isolated(world.core, policy) == world.ours.ray
    assert admitted(world.core, policy) == expected_admitted(world) | {
        world.scraper: {("TCP", RAY_METRICS_PORT)}}


def rename(policy: dict[str, Any], suffix: str) -> dict[str, Any]:
    """Another name, so that each test stores a policy of its own."""
    policy["metadata"]["name"] += suffix
    return policy


def expected_admitted(world: World) -> dict[Pod, Any]:
    return {pod: ALL_PORTS for pod in world.ours.ray} | {
        pod: {("TCP", DASHBOARD_PORT)} for pod in world.ours.drivers}


def test_a_pod_carrying_the_drivers_labels_is_admitted_as_the_driver(world):
    """The limit of label selectors: whoever may create pods in the namespace may copy the
    driver's labels, and the policy cannot tell that pod from the driver."""
    namespace = world.run.namespace
    impostor = plain_pod(world.core, namespace, {"grpo.dev/run": world.run.name,
                                                 "grpo.dev/role": "driver"})
    try:
        policy = world.create_policy(rename(network_policy(world.run), "-impostor"))
        assert admitted(world.core, policy)[impostor] == {("TCP", DASHBOARD_PORT)}
    finally:
        world.core.delete_namespaced_pod(impostor[1], namespace, grace_period_seconds=0)
