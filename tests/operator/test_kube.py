"""The status patch: a JSON merge patch that also removes what the new status dropped."""

from __future__ import annotations

import threading

import pytest
from kubernetes import client

from grpo_operator.cache import ObjectCache
from grpo_operator.kube import Kube, controlled_by, merge_patch


def apply(doc: dict, patch: dict) -> dict:
    """RFC 7386 applied, as the API server does."""
    out = dict(doc)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = apply(out[key], value)
        else:
            out[key] = value
    return out


def test_merge_patch_sends_changes_and_nulls_for_dropped_fields():
    old = {"phase": "Failed", "terminal": {"reason": "X"}, "ledger": {"a": 1, "b": 2},
           "conditions": [{"type": "Failed"}]}
    new = {"phase": "Recovering", "ledger": {"a": 1, "c": 3},
           "conditions": [{"type": "Failed"}, {"type": "Recovering"}]}
    patch = merge_patch(old, new)
    assert patch == {"phase": "Recovering", "terminal": None, "ledger": {"b": None, "c": 3},
                     "conditions": [{"type": "Failed"}, {"type": "Recovering"}]}
    assert apply(old, patch) == new
    assert merge_patch(new, new) == {}


def test_a_child_counts_only_when_this_run_controls_it():
    mine = {"metadata": {"ownerReferences": [{"uid": "u-1", "controller": True}]}}
    assert controlled_by(mine, "u-1")
    assert not controlled_by(mine, "u-2")
    assert not controlled_by({"metadata": {"ownerReferences": [{"uid": "u-1"}]}}, "u-1")
    assert not controlled_by({"metadata": {}}, "u-1")


@pytest.mark.cluster
def test_a_child_deleted_between_the_refused_create_and_the_read_is_created(k8s_api, namespace):
    """Against the real API server: the name is held when the create is tried and free when it
    is read (its holder deleted it meanwhile): the child is made, not taken as there."""
    from kubernetes import client

    from grpo_operator.cache import ObjectCache
    from grpo_operator.kube import Kube

    core = client.CoreV1Api(k8s_api)
    owner = core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="owner")))  # a real one: GC keeps its children
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="child")))

    class DeletedMeanwhile(Kube):
        def get(self, api_version, kind, ns, name):
            core.delete_namespaced_config_map(name, ns)  # after the create was refused
            return super().get(api_version, kind, ns, name)

    child = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "child", "namespace": namespace,
                          "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                                               "name": "owner", "uid": owner.metadata.uid,
                                               "controller": True}]},
             "data": {"made": "by the run"}}
    assert DeletedMeanwhile(k8s_api, ObjectCache()).create_if_absent(child) is True
    stored = core.read_namespaced_config_map("child", namespace)
    assert stored.data == {"made": "by the run"}


def test_concurrent_requests_all_answer_count_as_the_callers_and_the_first_failure_is_raised():
    kube = Kube(client.ApiClient(), ObjectCache())
    started, answered = threading.Barrier(3, timeout=5), []

    def request(name: str, fails: bool = False):
        def call():
            kube._count(read=name == "read")
            started.wait()  # all three in flight at once, or this times out
            answered.append(name)
            if fails:
                raise RuntimeError(name)
        return call

    with pytest.raises(RuntimeError, match="refused"):
        kube.concurrently(request("read"), request("refused", fails=True), request("create"))
    assert sorted(answered) == ["create", "read", "refused"]
    assert kube.take_request_count() == (3, 1)
