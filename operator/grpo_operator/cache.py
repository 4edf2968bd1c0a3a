"""What the operator knows of its runs and their children between passes.

kopf's watches deliver every GRPORun and every object labelled ``grpo.dev/run`` of the kinds
below, Secrets excepted (the label is a server-side selector: the API server sends nothing
else); this cache keeps them by kind and name, and a pass reads them from here instead of
asking the API server (controller-runtime's informer cache, on kopf's watches). kopf holds
every handler until the first listing of each child kind is indexed, so no run is reconciled
from a cache still filling up.

A watch event of a version this process already has from a request of its own (a create's
answer, a status write's, a read) is an echo: it wakes no run, the pass that made the request
having chosen when to look again.

A cache lags the API server, and a watch can say less than the truth. The rules:
- a child this process creates is put in at once (the create's answer), so the next pass does
  not create it again; a child created elsewhere and not seen yet is refused at create (409)
  and then read once;
- a run whose status this process just wrote is *behind* in the cache until that write's own
  event comes back (or a read shows it caught up): passes meanwhile read the run from the API
  server, so no pass acts on a status older than its own last write (the ReplicaSet
  controller's "expectations", for one object); a run whose write was refused as stale is
  behind until a read shows the cache caught up;
- while the GRPORun CRD's schema changes, the API server's watch may send events pruned by
  the old schema and resume after them: every run is behind for a while (``distrust_runs``)
  and then listed anew (``replace_runs``);
- deletions are applied only to the object they name (uid), never to a newer one of the same
  name that a create has put in already; kopf's relisting after a broken watch says nothing
  of what went meanwhile, so a periodic listing (``sweep``) drops what the API server no
  longer has (client-go's reflector replaces its store at each relist for the same reason).

What is kept of an object is only what a pass reads (``CachedKind.keep``), stored as compact
JSON beside its identity and decoded when a pass reads it: a thousand runs' children as
decoded JSON were most of the process's memory (a dict and a string per field, about 86 KiB
per run; as JSON under a fifth of it), and a pass reads a handful of objects. A read returns
a fresh copy, so nothing a pass does to it reaches the cache.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from typing import Any, NamedTuple

from grpo_operator.api.constants import GROUP, KIND, LABEL_RUN, PLURAL, VERSION

Shape = dict[str, "Shape | None"]
"""The fields of an object kept, nested; None keeps a field whole. A shape applied to a list
applies to each of its items."""


@dataclasses.dataclass(frozen=True)
class CachedKind:
    group: str
    version: str
    plural: str
    kind: str
    keep: Shape
    """What a pass reads of this kind (the cache's memory is mostly what it keeps)."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


# Of a child's metadata: who it is, whose it is (the labels a pass selects by, the controller
# it checks), and whether it is going.
_LABELS: Shape = dict.fromkeys((LABEL_RUN, "ray.io/node-type", "ray.io/cluster", "job-name"))
_CHILD_META: Shape = {
    **dict.fromkeys(("name", "namespace", "uid", "resourceVersion", "creationTimestamp",
                     "deletionTimestamp")),
    "labels": _LABELS,
    "ownerReferences": dict.fromkeys(("kind", "name", "uid", "controller")),
}
_CONDITIONS: Shape = dict.fromkeys(("type", "status", "reason", "message",
                                    "lastTransitionTime"))
_CONTAINER_STATUS: Shape = {"name": None, "state": None}  # exit codes, waits, start times
_RESOURCES: Shape = {"resources": None}  # GPU metering

RUN_KIND = CachedKind(GROUP, VERSION, PLURAL, KIND, {"spec": None, "status": None})
# Kinds the operator creates or reads per run, watched. Those it only creates are kept as
# metadata (a pass asks only whether they exist and who controls them).
CHILD_KINDS = (
    CachedKind("ray.io", "v1", "rayclusters", "RayCluster", {
        "metadata": _CHILD_META,
        "status": {"conditions": _CONDITIONS, "readyWorkerReplicas": None},
        "spec": {
            "suspend": None,
            # Whether its pods carry the run's label (and so are in this cache).
            "headGroupSpec": {"template": {"metadata": {"labels": {LABEL_RUN: None}}}}}}),
    CachedKind("batch", "v1", "jobs", "Job",
               {"metadata": _CHILD_META, "status": {"conditions": _CONDITIONS}}),
    CachedKind("", "v1", "pods", "Pod", {
        "metadata": _CHILD_META,
        "status": {"phase": None, "startTime": None, "conditions": _CONDITIONS,
                   "containerStatuses": _CONTAINER_STATUS,
                   "initContainerStatuses": _CONTAINER_STATUS},
        "spec": {"containers": _RESOURCES, "initContainers": _RESOURCES}}),
    CachedKind("", "v1", "configmaps", "ConfigMap", {"metadata": _CHILD_META, "data": None}),
    CachedKind("", "v1", "serviceaccounts", "ServiceAccount", {"metadata": _CHILD_META}),
    CachedKind("rbac.authorization.k8s.io", "v1", "roles", "Role", {"metadata": _CHILD_META}),
    CachedKind("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding",
               {"metadata": _CHILD_META}),
    CachedKind("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy",
               {"metadata": _CHILD_META}),
)
# Secrets are not watched: the operator holds no list on Secrets (docs/security.md). The ones
# it creates or finds are remembered (metadata only) until the next sweep.
SECRET_KIND = CachedKind("", "v1", "secrets", "Secret", {"metadata": _CHILD_META})
KINDS = {k.kind: k for k in (RUN_KIND, *CHILD_KINDS, SECRET_KIND)}

Key = tuple[str, str, str]  # (kind, namespace, name)


def slim(kind: str, obj: Any) -> dict[str, Any]:
    """The part of ``obj`` a pass reads (never its managedFields, the largest part of most
    objects)."""
    keep = KINDS[kind].keep
    meta = obj.get("metadata") or {}
    out = {"apiVersion": obj.get("apiVersion") or KINDS[kind].api_version, "kind": kind,
           "metadata": (_project(meta, keep["metadata"]) if "metadata" in keep
                        else {k: v for k, v in meta.items() if k != "managedFields"})}
    for field, shape in keep.items():
        if field != "metadata" and field in obj:
            out[field] = _project(obj[field], shape)
    return out


def _project(value: Any, shape: Shape | None) -> Any:
    if shape is None:
        return value
    if isinstance(value, list):
        return [_project(item, shape) for item in value]
    if isinstance(value, dict):
        return {k: _project(value[k], sub) for k, sub in shape.items() if k in value}
    return value


def _key(kind: str, obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return kind, meta.get("namespace") or "", meta["name"]


def _uid(obj: dict[str, Any]) -> str | None:
    return obj.get("metadata", {}).get("uid")


def _version(obj: dict[str, Any]) -> str | None:
    return obj.get("metadata", {}).get("resourceVersion")


class _Stored(NamedTuple):
    """An object as kept: what the cache's rules compare, and the rest as compact JSON."""

    uid: str | None
    version: str | None
    run: str | None  # its grpo.dev/run label
    json: bytes

    @classmethod
    def of(cls, obj: dict[str, Any]) -> _Stored:
        meta = obj["metadata"]
        return cls(meta.get("uid"), meta.get("resourceVersion"),
                   (meta.get("labels") or {}).get(LABEL_RUN),
                   json.dumps(obj, separators=(",", ":")).encode())

    def load(self) -> dict[str, Any]:
        return json.loads(self.json)


class ObjectCache:
    """Thread-safe: kopf's event loop, the reconcile workers and the sweeper all use it."""

    def __init__(self, clock=time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._objects: dict[Key, _Stored] = {}
        self._stored_at: dict[Key, float] = {}
        self._by_run: dict[tuple[str, str, str], set[str]] = {}  # (kind, ns, run) → names
        self._counts: dict[str, int] = {}  # kind → objects held
        self._own: dict[Key, str] = {}  # → the last version a request of this process returned
        self._behind: dict[Key, str | None] = {}  # → the version that catches it up, if known
        self._runs_distrusted_until = float("-inf")

    # -- fed by the watches ----------------------------------------------------------------

    def put(self, kind: str, obj: Any) -> None:
        """Store what a watch delivered."""
        stored = slim(kind, obj)
        key = _key(kind, stored)
        with self._lock:
            self._store(key, stored)
            if key in self._behind and self._behind[key] == _version(stored):
                del self._behind[key]

    def is_echo(self, kind: str, obj: Any) -> bool:
        """Whether ``obj`` is the version a request of this process last returned: its event
        tells the run nothing the pass that made the request did not know."""
        key, version = _key(kind, obj), _version(obj)
        with self._lock:
            return version is not None and self._own.get(key) == version

    def remove(self, kind: str, obj: Any) -> bool:
        """Drop ``obj`` on its deletion's event. Returns False if the cache holds a newer
        object of its name: kopf handles each object's events apart, so the deletion of an
        object may be handled after the creation of the next one of that name."""
        key = _key(kind, obj)
        with self._lock:
            current = self._objects.get(key)
            if current is not None and current.uid != _uid(obj):
                return False
            self._store(key, None)
            self._own.pop(key, None)
            self._behind.pop(key, None)
            return True

    # -- fed by this process's own requests ------------------------------------------------

    def created(self, kind: str, obj: Any) -> None:
        """An object this process created or just read: kept unless the watch has already
        delivered that object (its copy may be newer)."""
        stored = slim(kind, obj)
        key = _key(kind, stored)
        with self._lock:
            self._own[key] = _version(stored)
            current = self._objects.get(key)
            if current is None or current.uid != _uid(stored):
                self._store(key, stored)

    def patched(self, kind: str, obj: Any) -> None:
        """An object only this process writes, as its write left it."""
        stored = slim(kind, obj)
        key = _key(kind, stored)
        with self._lock:
            self._own[key] = _version(stored)
            self._store(key, stored)

    def wrote(self, kind: str, namespace: str, name: str, version: str | None) -> None:
        """This process wrote the object to ``version`` (None: a write was refused because the
        object had moved on to a version not known here): the cached copy is behind."""
        with self._lock:
            self._behind[(kind, namespace, name)] = version
            if version is not None:
                self._own[(kind, namespace, name)] = version

    def read(self, kind: str, obj: dict[str, Any]) -> None:
        """A fresh read of the object: it replaces a cached copy of the same version (a watch
        may have sent that version pruned), which has then caught up."""
        stored = slim(kind, obj)
        key = _key(kind, stored)
        with self._lock:
            current = self._objects.get(key)
            if current is not None and current.version == _version(stored):
                self._store(key, stored)
                self._behind.pop(key, None)

    def is_behind(self, kind: str, namespace: str, name: str) -> bool:
        """Whether a pass must read the object from the API server rather than from here."""
        with self._lock:
            return ((kind, namespace, name) in self._behind
                    or (kind == KIND and self._clock() < self._runs_distrusted_until))

    def distrust_runs(self, seconds: float) -> None:
        """For ``seconds`` every run is behind (its schema changed: what watches sent of it
        meanwhile may be pruned)."""
        with self._lock:
            self._runs_distrusted_until = max(self._runs_distrusted_until,
                                              self._clock() + seconds)

    def replace_runs(self, listed: list[dict[str, Any]], since: float) -> None:
        """A listing of every run, begun at ``since``, replaces the cached runs: each listed
        one is stored as listed; one stored before ``since`` and not listed is gone."""
        with self._lock:
            names = set()
            for obj in listed:
                stored = slim(KIND, obj)
                key = _key(KIND, stored)
                names.add(key)
                if self._stored_at.get(key, since) <= since:
                    self._store(key, stored)
            for key in [k for k in self._objects if k[0] == KIND and k not in names]:
                if self._stored_at[key] < since:
                    self._store(key, None)
                    self._behind.pop(key, None)

    # -- the periodic listing --------------------------------------------------------------

    def now(self) -> float:
        return self._clock()

    def sweep(self, kind: str, listed: set[tuple[str, str, str]], since: float,
              ) -> list[dict[str, Any]]:
        """Drop the objects of ``kind`` stored before ``since`` (when a listing began) that the
        listing did not return (``listed``: namespace, name, uid); returns them."""
        gone = []
        with self._lock:
            for key, obj in list(self._objects.items()):
                if (key[0] == kind and self._stored_at[key] < since
                        and (key[1], key[2], obj.uid) not in listed):
                    gone.append(obj.load())
                    self._store(key, None)
                    self._own.pop(key, None)
        return gone

    # -- read by the passes ----------------------------------------------------------------

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            stored = self._objects.get((kind, namespace, name))
        return None if stored is None else stored.load()

    def holds(self, kind: str, namespace: str, name: str) -> bool:
        with self._lock:
            return (kind, namespace, name) in self._objects

    def of_run(self, kind: str, namespace: str, run: str) -> list[dict[str, Any]]:
        """Objects of ``kind`` labelled with the run's name (anyone may set a label: callers
        check who controls what they find)."""
        with self._lock:
            names = self._by_run.get((kind, namespace, run), ())
            stored = [self._objects[(kind, namespace, n)] for n in sorted(names)]
        return [s.load() for s in stored]

    def forget_run(self, namespace: str, run: str) -> None:
        """The run is gone: so is what is remembered of it and its children (the watched
        ones' own deletions follow as events)."""
        with self._lock:
            for key in [(KIND, namespace, run)] + [
                    (kind, namespace, name) for kind in KINDS
                    for name in self._by_run.get((kind, namespace, run), ())]:
                self._store(key, None)
                self._own.pop(key, None)
                self._behind.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)

    def count(self, kind: str) -> int:
        """Objects of ``kind`` held."""
        with self._lock:
            return self._counts.get(kind, 0)

    def _store(self, key: Key, obj: dict[str, Any] | None) -> None:
        kind, namespace, name = key
        old = self._objects.pop(key, None)
        self._stored_at.pop(key, None)
        if old is not None:
            self._counts[kind] -= 1
            names = self._by_run.get((kind, namespace, old.run))
            if names is not None:
                names.discard(name)
                if not names:
                    del self._by_run[(kind, namespace, old.run)]
        if obj is None:
            return
        stored = self._objects[key] = _Stored.of(obj)
        self._counts[kind] = self._counts.get(kind, 0) + 1
        self._stored_at[key] = self._clock()
        if stored.run is not None:
            self._by_run.setdefault((kind, namespace, stored.run), set()).add(name)
