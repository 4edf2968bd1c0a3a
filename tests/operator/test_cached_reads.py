"""Against the real API server: once the cache holds a run and its children, a pass reads
nothing from the API server — it writes only what changed; a sweep finds what went unseen."""

from __future__ import annotations

import contextlib

import pytest
from kubernetes import client, dynamic

from grpo_operator import kube as kube_module
from grpo_operator.acceptance import Confinement
from grpo_operator.api.constants import KIND, LABEL_RUN
from grpo_operator.cache import CHILD_KINDS, RUN_KIND, ObjectCache
from grpo_operator.controller import Controller
from grpo_operator.kube import Kube
from grpo_operator.reconcile import Policy
from tests.operator.conftest import ChartIdentity, running_session_operator
from tests.operator.lifecycle.runs import Runs, manifest
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


def deliver(cache: ObjectCache, api, namespace: str) -> None:
    """What the watches would have delivered by now: the namespace's runs and labelled
    children as the API server lists them (the watches' first listing)."""
    client = dynamic.DynamicClient(api)
    for kind in (RUN_KIND, *CHILD_KINDS):
        resource = client.resources.get(api_version=kind.api_version, kind=kind.kind)
        selector = None if kind is RUN_KIND else LABEL_RUN
        for item in resource.get(namespace=namespace, label_selector=selector).items:
            cache.put(kind.kind, item.to_dict())


def _controller(identity: ChartIdentity, tmp_path) -> Controller:
    """A controller acting as the chart's ServiceAccount, never as the admin: the API server
    refuses it what it refuses a production operator (binding a Role not yet there, say)."""
    policy = Policy(confinement=Confinement(host_path_prefixes=(str(tmp_path),)))
    return Controller(Kube(identity.api_client(), ObjectCache()), policy=policy,
                      signing_key=b"k" * 32)


def test_a_pass_over_a_cached_run_and_children_reads_nothing(k8s_api, chart_identity, namespace,
                                                              tmp_path, request):
    running = running_session_operator(request)
    with running.paused() if running else contextlib.nullcontext():
        runs = Runs(k8s_api, namespace)
        for volume in ("model", "data", "checkpoints"):  # what the Ray pods mount
            (tmp_path / volume).mkdir()
        runs.create(manifest("cached", str(tmp_path)))
        controller = _controller(chart_identity, tmp_path)
        kube, cache = controller.kube, controller.kube.cache

        deliver(cache, k8s_api, namespace)
        controller.reconcile(namespace, "cached")  # accepts it and makes its children
        first, first_reads = kube.take_request_count()
        assert runs.status("cached")["children"]["rayCluster"] == "cached"
        assert first_reads == 0
        assert cache.is_behind(KIND, namespace, "cached")  # its own write, not yet delivered

        deliver(cache, k8s_api, namespace)
        assert not cache.is_behind(KIND, namespace, "cached")  # the echo arrived
        for _ in range(2):
            controller.reconcile(namespace, "cached")
            requests, reads = kube.take_request_count()
            assert reads == 0, f"{reads} reads in a pass over cached children"
            deliver(cache, k8s_api, namespace)
        assert requests <= 1  # a status write at most, no create of what is there
        assert first > requests

        # Once the cluster is ready, the pass that starts the driver makes the driver's own
        # objects (never made before: created, not looked for first) and its Job.
        def started() -> bool:
            deliver(cache, k8s_api, namespace)
            controller.reconcile(namespace, "cached")
            requests, reads = kube.take_request_count()
            assert reads == 0, f"{reads} reads in a pass (requests {requests})"
            return runs.phase("cached") == "Running"

        wait_for(started, 180, what="the driver started", interval=1)
        children = runs.children("cached")
        assert children["Job"] == ["cached-a1"] and children["Role"] == ["cached-trainer"]
        assert "cached-report-key" in children["Secret"]


def test_a_sweep_drops_a_child_deleted_unseen_and_wakes_its_run(k8s_api, chart_identity,
                                                                namespace, tmp_path, request):
    running = running_session_operator(request)
    with running.paused() if running else contextlib.nullcontext():
        runs = Runs(k8s_api, namespace)
        # Workers that fit no node: the run stays Provisioning, its children ensured each pass.
        runs.create(manifest("unseen", str(tmp_path), resources__gpusPerWorker=16))
        controller = _controller(chart_identity, tmp_path)
        cache = controller.kube.cache
        deliver(cache, k8s_api, namespace)
        controller.reconcile(namespace, "unseen")
        deliver(cache, k8s_api, namespace)
        assert cache.get("NetworkPolicy", namespace, "unseen-ray-ingress") is not None
        policies = dynamic.DynamicClient(k8s_api).resources.get(
            api_version="networking.k8s.io/v1", kind="NetworkPolicy")
        # Deleted while no watch delivered it (its DELETED lost in a watch's gap).
        policies.delete(name="unseen-ray-ingress", namespace=namespace)
        assert len(controller.queue) == 0

        assert controller.sweep() == 1
        assert cache.get("NetworkPolicy", namespace, "unseen-ray-ingress") is None
        assert cache.get("RayCluster", namespace, "unseen") is not None  # listed: kept
        assert controller.queue.get(timeout=0) == (namespace, "unseen")
        controller.reconcile(namespace, "unseen")
        assert policies.get(name="unseen-ray-ingress", namespace=namespace)  # made again


def test_a_cluster_made_before_its_pods_were_labelled_has_its_pods_listed(
        k8s_api, chart_identity, namespace, tmp_path, request):
    """An operator upgraded under a running run: that run's Ray pods lack the run's label, so
    they are not in the cache; the pass lists them from the API server."""
    running = running_session_operator(request)
    with running.paused() if running else contextlib.nullcontext():
        runs = Runs(k8s_api, namespace)
        runs.create(manifest("older", str(tmp_path), resources__gpusPerWorker=16))
        controller = _controller(chart_identity, tmp_path)
        kube, cache = controller.kube, controller.kube.cache
        deliver(cache, k8s_api, namespace)
        controller.reconcile(namespace, "older")
        deliver(cache, k8s_api, namespace)
        controller.reconcile(namespace, "older")
        deliver(cache, k8s_api, namespace)
        kube.take_request_count()
        controller.reconcile(namespace, "older")
        assert kube.take_request_count()[1] == 0  # labelled: its pods come from the cache

        deliver(cache, k8s_api, namespace)  # the last pass's own status write, if it made one
        rc = cache.get("RayCluster", namespace, "older")
        del rc["spec"]["headGroupSpec"]["template"]["metadata"]["labels"][LABEL_RUN]
        cache.put("RayCluster", rc)  # as an older operator made it
        controller.reconcile(namespace, "older")
        assert kube.take_request_count()[1] == 1  # the pods' listing


def _unschedulable_pod(k8s_api, namespace: str) -> bool:
    pods = client.CoreV1Api(k8s_api).list_namespaced_pod(namespace).items
    return any(c.type == "PodScheduled" and c.status == "False"
               for pod in pods for c in pod.status.conditions or ())


def test_a_new_leader_reads_the_secrets_another_made_and_creates_nothing(
        k8s_api, chart_identity, namespace, tmp_path, request):
    """A stand-by taking over (or a restarted operator) has every watched child in its cache
    but none of the Secrets, which are never watched: it reads each once, as the run's status
    says they were made, instead of a refused create and then a read."""
    running = running_session_operator(request)
    with running.paused() if running else contextlib.nullcontext():
        runs = Runs(k8s_api, namespace)
        # Workers that fit no node: the run stays Provisioning, its children ensured each pass.
        runs.create(manifest("handed-over", str(tmp_path), resources__gpusPerWorker=16))
        leader = _controller(chart_identity, tmp_path)
        leader.reconcile(namespace, "handed-over")  # makes the RayCluster
        # The scheduler's verdict on the worker changes the run's status: let the leader see it,
        # or the successor's pass would write it (a write the hand-over did not cause).
        wait_for(lambda: _unschedulable_pod(k8s_api, namespace), timeout=120,
                 what="the scheduler's verdict on the worker pod")
        for _ in range(5):  # until a pass over what it made has nothing to write
            deliver(leader.kube.cache, k8s_api, namespace)
            leader.reconcile(namespace, "handed-over")
            if leader.kube.take_request_count()[0] == 0:
                break
        else:
            pytest.fail("every pass wrote something")

        successor = _controller(chart_identity, tmp_path)
        deliver(successor.kube.cache, k8s_api, namespace)
        successor.reconcile(namespace, "handed-over")
        requests, reads = successor.kube.take_request_count()
        # The report key's Secret is the driver's: made once the cluster is ready.
        assert (requests, reads) == (1, 1), "the Ray token Secret, read once"
        successor.reconcile(namespace, "handed-over")
        assert successor.kube.take_request_count() == (0, 0)  # remembered now


def test_a_sweep_listing_reads_every_page(k8s_api, chart_identity, namespace, monkeypatch):
    """The listing follows the API server's continue tokens to the end, and takes the labelled
    objects only: a sweep that stopped at its first page would drop the rest from the cache."""
    monkeypatch.setattr(kube_module, "LIST_PAGE", 2)
    config_maps = dynamic.DynamicClient(k8s_api).resources.get(api_version="v1",
                                                                kind="ConfigMap")
    for i, labels in enumerate([{LABEL_RUN: f"run-{i}"} for i in range(5)] + [{}]):
        config_maps.create(namespace=namespace, body={
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"paged-{i}", "labels": labels}})
    kube = Kube(chart_identity.api_client(), ObjectCache())
    config_map_kind = next(kind for kind in CHILD_KINDS if kind.kind == "ConfigMap")

    listed = kube.list_labelled(config_map_kind, namespace)

    assert {name for _, name, _ in listed} == {f"paged-{i}" for i in range(5)}
    assert all(ns == namespace and uid for ns, _, uid in listed)
    assert kube.take_request_count() == (3, 3)  # pages of 2, 2 and 1
