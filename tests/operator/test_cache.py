"""The object cache: what a pass reads instead of asking the API server, and the rules that
keep its lag behind the watches harmless."""

from __future__ import annotations

from grpo_operator.api.constants import KIND, LABEL_RUN
from grpo_operator.cache import ObjectCache, slim


def obj(kind: str, name: str, *, uid: str = "u1", version: str = "1", run: str | None = "r",
        **fields) -> dict:
    labels = {LABEL_RUN: run} if run else {}
    return {"kind": kind, "metadata": {"name": name, "namespace": "ns", "uid": uid,
                                       "resourceVersion": version, "labels": labels,
                                       "managedFields": [{"manager": "kubectl"}]},
            **fields}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_only_what_a_pass_reads_is_kept():
    containers = [{"name": "ray", "image": "i", "env": [{"name": "A", "value": "1"}],
                   "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    pod = slim("Pod", obj("Pod", "p", spec={"nodeName": "n", "containers": containers},
                          status={"phase": "Running"}))
    assert "managedFields" not in pod["metadata"]
    assert pod["metadata"]["labels"] == {LABEL_RUN: "r"}
    assert pod["apiVersion"] == "v1" and pod["status"] == {"phase": "Running"}
    assert pod["spec"] == {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    run = slim(KIND, obj(KIND, "r", spec={"a": 1}))
    assert run["spec"] == {"a": 1} and "managedFields" not in run["metadata"]
    assert run["metadata"]["resourceVersion"] == "1"
    secret = slim("Secret", obj("Secret", "s", data={"token": "c2VjcmV0"}))
    assert "data" not in secret  # a Secret's values never stay in the operator's memory
    assert slim("ConfigMap", obj("ConfigMap", "c", data={"k": "v"}))["data"] == {"k": "v"}
    # Of a pod's labels, those a pass selects by; of its owners, who controls it; of its
    # status, what says whether it runs, why not, and how it ended.
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True,
             "blockOwnerDeletion": True}
    kept = slim("Pod", obj("Pod", "p", status={
        "phase": "Running", "qosClass": "Guaranteed", "podIP": "10.0.0.1",
        "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None}],
        "containerStatuses": [{"name": "ray", "imageID": "x", "state": {"running": {}}}]}))
    assert kept["status"] == {"phase": "Running", "conditions": [{"type": "Ready",
                                                                  "status": "True"}],
                              "containerStatuses": [{"name": "ray", "state": {"running": {}}}]}
    labelled = obj("Pod", "p")
    labelled["metadata"]["labels"].update({"job-name": "j", "app": "x"})
    labelled["metadata"]["ownerReferences"] = [owner]
    meta = slim("Pod", labelled)["metadata"]
    assert meta["labels"] == {LABEL_RUN: "r", "job-name": "j"}
    assert meta["ownerReferences"] == [{"kind": "Job", "name": "j", "uid": "u",
                                        "controller": True}]


def test_objects_are_found_by_name_and_by_run_label():
    cache = ObjectCache()
    cache.put("Pod", obj("Pod", "b"))
    cache.put("Pod", obj("Pod", "a"))
    cache.put("Pod", obj("Pod", "other", run="s"))
    cache.put("Pod", obj("Pod", "unlabelled", run=None))
    assert cache.get("Pod", "ns", "a")["metadata"]["name"] == "a"
    assert [p["metadata"]["name"] for p in cache.of_run("Pod", "ns", "r")] == ["a", "b"]
    cache.put("Pod", obj("Pod", "a", run="s", version="2"))  # relabelled
    assert [p["metadata"]["name"] for p in cache.of_run("Pod", "ns", "r")] == ["b"]
    assert len(cache.of_run("Pod", "ns", "s")) == 2
    assert cache.get("Job", "ns", "a") is None
    # Counted by kind (a replaced copy is one object; a removed one none).
    assert (cache.count("Pod"), cache.count("Job")) == (4, 0)
    # A read is a copy: what a pass does to it stays in the pass.
    cache.get("Pod", "ns", "a")["metadata"]["name"] = "changed"
    assert cache.get("Pod", "ns", "a")["metadata"]["name"] == "a"
    assert cache.holds("Pod", "ns", "a") and not cache.holds("Pod", "ns", "z")
    cache.remove("Pod", obj("Pod", "b"))
    assert cache.count("Pod") == 3


def test_a_late_deletion_spares_the_newer_object_of_the_same_name():
    cache = ObjectCache()
    cache.put("Job", obj("Job", "j", uid="old"))
    cache.created("Job", obj("Job", "j", uid="new"))  # made again before the old one's event
    cache.remove("Job", obj("Job", "j", uid="old"))
    assert cache.get("Job", "ns", "j")["metadata"]["uid"] == "new"
    cache.remove("Job", obj("Job", "j", uid="new"))
    assert cache.get("Job", "ns", "j") is None


def test_a_create_answer_never_replaces_what_the_watch_delivered_since():
    cache = ObjectCache()
    cache.put("RayCluster", obj("RayCluster", "c", version="7", status={"state": "ready"}))
    cache.created("RayCluster", obj("RayCluster", "c", version="5"))
    assert cache.get("RayCluster", "ns", "c")["metadata"]["resourceVersion"] == "7"


def test_a_run_is_behind_from_its_write_until_that_writes_echo():
    cache = ObjectCache()
    cache.put(KIND, obj(KIND, "r", version="1"))
    cache.wrote(KIND, "ns", "r", "3")
    assert cache.is_behind(KIND, "ns", "r")
    cache.put(KIND, older := obj(KIND, "r", version="2"))  # an older event, in order
    assert cache.is_behind(KIND, "ns", "r") and not cache.is_echo(KIND, older)
    cache.put(KIND, echo := obj(KIND, "r", version="3"))
    assert not cache.is_behind(KIND, "ns", "r")  # caught up
    assert cache.is_echo(KIND, echo)
    assert not cache.is_echo(KIND, obj(KIND, "r", version="4"))  # someone else's write


def test_a_refused_write_leaves_the_run_behind_until_a_read_agrees_with_the_cache():
    cache = ObjectCache()
    cache.put(KIND, obj(KIND, "r", version="4"))
    cache.wrote(KIND, "ns", "r", None)  # refused: stored is newer than 4, which is not known
    cache.read(KIND, obj(KIND, "r", version="6"))
    assert cache.is_behind(KIND, "ns", "r")  # the cache still has 4
    cache.put(KIND, obj(KIND, "r", version="6"))
    assert not cache.is_echo(KIND, obj(KIND, "r", version="6"))  # not a write of ours
    cache.read(KIND, obj(KIND, "r", version="6"))
    assert not cache.is_behind(KIND, "ns", "r")


def test_while_the_schema_changes_runs_are_behind_and_a_read_replaces_a_pruned_copy():
    clock = Clock()
    cache = ObjectCache(clock)
    cache.put(KIND, obj(KIND, "r", version="7", status={"phase": "Running"}))  # pruned
    cache.distrust_runs(120)
    assert cache.is_behind(KIND, "ns", "r") and cache.is_behind(KIND, "ns", "other")
    assert not cache.is_behind("Job", "ns", "r")
    cache.read(KIND, obj(KIND, "r", version="7", status={"phase": "Running",
                                                         "fromNewer": "x"}))
    assert cache.get(KIND, "ns", "r")["status"]["fromNewer"] == "x"
    assert cache.is_behind(KIND, "ns", "r")  # until the window ends
    clock.t = 121
    assert not cache.is_behind(KIND, "ns", "r")


def test_a_listing_of_the_runs_replaces_them_and_drops_the_unlisted():
    clock = Clock()
    cache = ObjectCache(clock)
    cache.put(KIND, obj(KIND, "pruned", version="7", status={}))
    cache.put(KIND, obj(KIND, "gone", version="3"))
    clock.t = 10
    since = cache.now()
    clock.t = 11
    cache.put(KIND, obj(KIND, "new", version="9"))  # after the listing began: kept
    cache.put(KIND, obj(KIND, "moved-on", version="12"))
    cache.replace_runs([obj(KIND, "pruned", version="7", status={"fromNewer": "x"}),
                        obj(KIND, "moved-on", version="11")], since)
    assert cache.get(KIND, "ns", "pruned")["status"] == {"fromNewer": "x"}
    assert cache.get(KIND, "ns", "gone") is None
    assert cache.get(KIND, "ns", "new") is not None
    assert cache.get(KIND, "ns", "moved-on")["metadata"]["resourceVersion"] == "12"


def test_the_event_of_its_own_create_is_an_echo():
    cache = ObjectCache()
    cache.created("Job", made := obj("Job", "j", version="5"))
    cache.put("Job", made)
    assert cache.is_echo("Job", made)
    assert not cache.is_echo("Job", obj("Job", "j", version="6"))  # the Job controller's
    assert not cache.is_echo("Job", obj("Job", "k", version="5"))


def test_a_sweep_drops_what_its_listing_lacks_unless_stored_after_the_listing_began():
    clock = Clock()
    cache = ObjectCache(clock)
    cache.put("Pod", obj("Pod", "gone", uid="g"))  # deleted while the watch was broken
    cache.put("Pod", obj("Pod", "kept", uid="k"))
    cache.put("Pod", obj("Pod", "replaced", uid="old"))
    cache.put("Job", obj("Job", "gone", uid="g"))  # another kind: not this listing's
    clock.t = 10
    since = cache.now()
    clock.t = 11
    cache.created("Pod", obj("Pod", "made-during", uid="m"))  # after the listing began
    listed = {("ns", "kept", "k"), ("ns", "replaced", "new")}
    gone = cache.sweep("Pod", listed, since)
    assert sorted(p["metadata"]["name"] for p in gone) == ["gone", "replaced"]
    assert [p["metadata"]["name"] for p in cache.of_run("Pod", "ns", "r")] == [
        "kept", "made-during"]
    assert cache.get("Job", "ns", "gone") is not None


def test_a_gone_run_takes_what_is_remembered_of_its_children():
    cache = ObjectCache()
    cache.created("Secret", obj("Secret", "r-ray-auth"))
    cache.put("Job", obj("Job", "r-driver-1"))
    cache.put("Job", obj("Job", "s-driver-1", run="s"))
    cache.put(KIND, obj(KIND, "r", run=None))
    cache.forget_run("ns", "r")
    assert cache.get(KIND, "ns", "r") is None
    assert cache.get("Secret", "ns", "r-ray-auth") is None
    assert cache.get("Job", "ns", "r-driver-1") is None
    assert cache.get("Job", "ns", "s-driver-1") is not None


def test_a_patch_answer_replaces_the_cached_copy_and_its_event_is_an_echo():
    cache = ObjectCache()
    cache.put("ConfigMap", obj("ConfigMap", "c", version="3", data={"attempt": "1"}))
    cache.patched("ConfigMap", patched := obj("ConfigMap", "c", version="4",
                                              data={"attempt": "2"}))
    assert cache.get("ConfigMap", "ns", "c")["data"] == {"attempt": "2"}
    assert cache.is_echo("ConfigMap", patched)
