"""Status writes are conditional on the resourceVersion the pass read (against the real API
server): a run changed in between — by a user, or a second operator — is not written over with
a decision made on the older state; the pass starts again from what is stored, and that is not
a failure (no Stalled, no backoff)."""

from __future__ import annotations

import contextlib

import pytest

from grpo_operator.api.constants import GROUP, PLURAL, VERSION
from grpo_operator.cache import ObjectCache
from grpo_operator.controller import Controller
from grpo_operator.kube import Kube, StaleStatus
from tests.operator.conftest import running_session_operator
from tests.operator.lifecycle.runs import Runs, manifest
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture
def runs(k8s_api, grporun_crd, namespace, request):
    """The session's operator paused: the controller under test is the only one acting."""
    running = running_session_operator(request)
    with running.paused() if running else contextlib.nullcontext():
        yield Runs(k8s_api, namespace)


class ConcurrentWriter(Kube):
    """The real Kube (its cache fed by nothing but its own requests), with another writer
    touching the run right after each of the first ``times`` reads of it (as a user's `kubectl
    annotate` between read and write would)."""

    def __init__(self, api, times: int):
        super().__init__(api, ObjectCache())
        self.times = times

    def get_run(self, namespace, name):
        body = super().get_run(namespace, name)
        if body is not None and self.times > 0:
            self.times -= 1
            self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name,
                {"metadata": {"annotations": {"example.com/touched": str(self.times)}}})
        return body


def test_a_write_over_a_changed_run_is_refused(k8s_api, runs):
    # hostPaths no installation here allows: the pass refuses the run, creating nothing.
    run = runs.create(manifest("stale", "/nonexistent"))
    kube = Kube(k8s_api, ObjectCache())
    read = run["metadata"]["resourceVersion"]
    runs.patch("stale", {"metadata": {"annotations": {"example.com/edit": "1"}}})
    with pytest.raises(StaleStatus, match="no longer at resourceVersion"):
        kube.patch_status(runs.namespace, "stale", {"phase": "Pending"}, read)
    assert "phase" not in runs.status("stale")
    current = runs.get("stale")["metadata"]["resourceVersion"]
    written = kube.patch_status(runs.namespace, "stale", {"phase": "Pending"}, current)
    assert runs.phase("stale") == "Pending"
    assert written == runs.get("stale")["metadata"]["resourceVersion"] != current


def test_a_pass_over_a_changed_run_starts_again_and_is_no_failure(k8s_api, runs):
    runs.create(manifest("raced", "/nonexistent"))
    kube = ConcurrentWriter(k8s_api, times=1)
    controller = Controller(kube, workers=1, signing_key=b"k" * 32)
    with pytest.raises(StaleStatus):
        controller.reconcile(runs.namespace, "raced")
    assert "phase" not in runs.status("raced")  # the stale decision was not applied
    assert runs.get("raced")["metadata"]["annotations"]["example.com/touched"] == "0"

    kube.times = 2  # the work loop: two stale passes, then one that goes through
    controller.start()
    try:
        controller.enqueue(runs.namespace, "raced")
        wait_for(lambda: runs.phase("raced") == "Failed", 30, what="the run refused")
    finally:
        controller.stop()
    assert kube.times == 0
    status = runs.status("raced")
    assert status["terminal"]["reason"] == "HostPathNotAllowed", status
    # Stalled says how the run ended, not that a pass failed.
    assert runs.condition("raced", "Stalled")["reason"] == "HostPathNotAllowed", status
    assert controller._failures == {}
