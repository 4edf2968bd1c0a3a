"""Watch events reach the cache and wake the right run (a real cache and work queue; no
request is made); a new schema makes runs read from the API server; startup waits until
every child's kind is served (against the real API server)."""

from __future__ import annotations

import asyncio
import time

import kopf
import pytest
from kubernetes import client

from grpo_operator import main
from grpo_operator.api.constants import CRD_NAME, KIND, LABEL_RUN
from grpo_operator.cache import CHILD_KINDS, CachedKind, ObjectCache
from grpo_operator.controller import CHILD_EVENT_BATCH_SECONDS, Controller
from grpo_operator.kube import Kube


def controller() -> Controller:
    return Controller(Kube(client.ApiClient(), ObjectCache()), signing_key=b"k" * 32)


def body(kind: str, name: str, version: str = "1", labels: dict | None = None,
         uid: str = "u") -> dict:
    return {"kind": kind, "metadata": {"name": name, "namespace": "team-a", "uid": uid,
                                       "resourceVersion": version, "labels": labels or {}}}


def queued(c: Controller, within: float = 0.0) -> list:
    """The keys due within ``within`` seconds: the first waited for, then those due with it."""
    keys = []
    while (key := c.queue.get(timeout=within)) is not None:
        keys.append(key)
        c.queue.done(key)
        within = 0.0
    return keys


def test_a_childs_event_wakes_the_run_named_by_its_label():
    c = controller()
    c.run_event(None, body(KIND, "my-run"))
    assert queued(c) == [("team-a", "my-run")]
    c.child_event("RayCluster", "MODIFIED",
                  body("RayCluster", "my-run-ray", labels={LABEL_RUN: "my-run"}))
    assert queued(c) == [("team-a", "my-run")]  # a RayCluster's change: at once
    c.child_event("RayCluster", "DELETED",
                  body("RayCluster", "my-run-ray", labels={LABEL_RUN: "my-run"}))
    assert queued(c, CHILD_EVENT_BATCH_SECONDS + 1) == [("team-a", "my-run")]
    c.child_event("Pod", "MODIFIED", body("Pod", "p", labels={LABEL_RUN: "gone"}))
    assert queued(c, CHILD_EVENT_BATCH_SECONDS + 1) == []  # no such run: nothing is woken


def test_a_pod_turning_ready_wakes_its_run_at_once():
    """The cluster's health is read from its pods: their last one ready is what the run
    waits for."""
    c = controller()
    c.run_event(None, body(KIND, "my-run"))
    assert queued(c) == [("team-a", "my-run")]
    pod = body("Pod", "my-run-head", labels={LABEL_RUN: "my-run"})
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
    c.child_event("Pod", "MODIFIED", pod)
    assert queued(c) == []  # running, not ready: batched
    assert queued(c, CHILD_EVENT_BATCH_SECONDS + 1) == [("team-a", "my-run")]
    pod["status"]["conditions"][0]["status"] = "True"
    c.child_event("Pod", "MODIFIED", pod)
    assert queued(c) == [("team-a", "my-run")]


def test_a_burst_of_child_events_wakes_the_run_once_after_the_first_of_them():
    c = controller()
    c.run_event(None, body(KIND, "my-run"))
    assert queued(c) == [("team-a", "my-run")]
    first = time.monotonic()
    for i, kind in enumerate(("Pod", "Pod", "Pod", "Job")):
        c.child_event(kind, "ADDED" if i < 3 else "MODIFIED",
                      body(kind, f"child-{i}", labels={LABEL_RUN: "my-run"}))
    assert queued(c) == []  # not at once
    assert c.queue.get(timeout=CHILD_EVENT_BATCH_SECONDS + 1) == ("team-a", "my-run")
    # Due one batch after the first event, not pushed back by the later ones.
    assert time.monotonic() - first < 2 * CHILD_EVENT_BATCH_SECONDS
    c.queue.done(("team-a", "my-run"))
    assert queued(c) == []  # once
    # A run's own change is not batched.
    c.run_event("MODIFIED", body(KIND, "my-run", "2"))
    assert queued(c) == [("team-a", "my-run")]


def test_the_echo_of_its_own_status_write_does_not_wake_a_run():
    c = controller()
    c.run_event(None, body(KIND, "r", "1"))  # the first listing
    assert queued(c) == [("team-a", "r")]
    c.kube.cache.wrote(KIND, "team-a", "r", "2")
    c.run_event("MODIFIED", body(KIND, "r", "2"))
    assert queued(c) == []
    c.run_event("MODIFIED", body(KIND, "r", "3"))  # someone else's change
    assert queued(c) == [("team-a", "r")]
    assert c.kube.cache.get(KIND, "team-a", "r")["metadata"]["resourceVersion"] == "3"


def test_a_deleted_run_is_forgotten_with_its_remembered_children():
    c = controller()
    c.run_event(None, body(KIND, "r"))
    c.kube.cache.created("Secret", body("Secret", "r-ray-auth", labels={LABEL_RUN: "r"}))
    c.run_event("DELETED", body(KIND, "r"))
    assert queued(c) == []
    assert c.kube.cache.get(KIND, "team-a", "r") is None
    assert c.kube.cache.get("Secret", "team-a", "r-ray-auth") is None


def test_the_late_deletion_of_a_run_leaves_the_run_made_anew_under_its_name():
    """kopf handles each object's events apart (by uid): the old run's DELETED may come after
    the new one's ADDED, while the new one waits out a backoff on the old one's children."""
    c = controller()
    c.run_event(None, body(KIND, "r", uid="old"))
    assert queued(c) == [("team-a", "r")]
    c.run_event("ADDED", body(KIND, "r", "2", uid="new"))
    assert queued(c) == [("team-a", "r")]
    c.enqueue("team-a", "r", delay=60)  # its retry
    c.run_event("DELETED", body(KIND, "r", "3", uid="old"))
    assert c.kube.cache.get(KIND, "team-a", "r")["metadata"]["uid"] == "new"
    assert len(c.queue) == 1
    # The old run's cluster goes: the new run is woken at once.
    c.child_event("RayCluster", "DELETED",
                  body("RayCluster", "r", labels={LABEL_RUN: "r"}, uid="old-cluster"))
    assert queued(c) == [("team-a", "r")]


def test_a_new_generation_of_the_crd_makes_passes_read_their_runs_from_the_api_server():
    c = controller()
    memo = kopf.Memo(controller=c)

    def crd_event(type_: str | None, generation: int) -> None:
        crd = {"metadata": {"name": CRD_NAME, "generation": generation}}
        asyncio.run(main.on_crd_event(event={"type": type_, "object": crd}, memo=memo))

    try:
        crd_event(None, 1)  # the first listing
        crd_event("MODIFIED", 1)  # its status, not its schema
        assert not c.kube.cache.is_behind(KIND, "team-a", "r")
        crd_event("MODIFIED", 2)
        assert c.kube.cache.is_behind(KIND, "team-a", "r")
    finally:
        c.stop()


@pytest.mark.cluster
def test_the_operator_waits_at_startup_for_every_childs_kind_to_be_served(
    cluster, k8s_api, grporun_crd, monkeypatch
):
    """kopf watches only the kinds served when startup returns (its CRD watch sees this CRD
    alone, checked here against the API server), so a missing one stops startup with its
    name, before anything starts."""
    unserved = CachedKind("widgets.example.com", "v1", "widgets", "Widget", {})
    assert Kube(k8s_api, ObjectCache()).unserved((*CHILD_KINDS, unserved)) == [
        "Widget (widgets.example.com/v1)"]

    from kubernetes.config import kube_config
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(cluster.kubeconfig))
    monkeypatch.setattr(main, "CHILD_KINDS", (*CHILD_KINDS, unserved))
    memo, settings = kopf.Memo(), kopf.OperatorSettings()
    default = client.Configuration.get_default_copy()
    try:
        with pytest.raises(kopf.TemporaryError, match=r"does not serve Widget "
                           r"\(widgets.example.com/v1\): install KubeRay") as refused:
            main.startup(settings=settings, memo=memo)
    finally:  # startup loads the kubeconfig as the client's default
        client.Configuration.set_default(default)
    assert refused.value.delay == main.UNSERVED_RETRY_SECONDS
    assert "controller" not in memo

    # The selector kopf's CRD watch sends (as kopf collects it), answered by the API server:
    # this CRD alone, not KubeRay's.
    from kopf._cogs.structs.references import Resource
    crds = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    selector = ",".join(settings.watching.field_selectors.collect(crds))
    listed = client.ApiextensionsV1Api(k8s_api).list_custom_resource_definition(
        field_selector=selector)
    assert [crd.metadata.name for crd in listed.items] == [CRD_NAME]
