"""Against the real API server: once the cache holds a run and its children, a pass reads
nothing from the API server — it writes only what changed."""

from __future__ import annotations

import contextlib

import pytest
from kubernetes import dynamic

from grpo_operator.acceptance import Confinement
from grpo_operator.api.constants import KIND, LABEL_RUN
from grpo_operator.cache import CHILD_KINDS, RUN_KIND, ObjectCache
from grpo_operator.controller import Controller
from grpo_operator.kube import Kube
from grpo_operator.reconcile import Policy
from tests.operator.conftest import running_session_operator
from tests.operator.lifecycle.runs import Runs, manifest

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


def test_a_pass_over_cached_children_reads_nothing(k8s_api, grporun_crd, namespace, tmp_path,
                                                   request):
    running = running_session_operator(request)
    with running.paused() if running else contextlib.nullcontext():
        runs = Runs(k8s_api, namespace)
        runs.create(manifest("cached", str(tmp_path)))
        cache = ObjectCache()
        kube = Kube(k8s_api, cache)
        policy = Policy(confinement=Confinement(host_path_prefixes=(str(tmp_path),)))
        controller = Controller(kube, policy=policy, signing_key=b"k" * 32)

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
