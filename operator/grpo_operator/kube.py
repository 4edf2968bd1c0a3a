"""The one module that talks to the Kubernetes API for the operator."""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime
import functools
import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

from grpo_operator.api.constants import (
    API_VERSION,
    GROUP,
    KIND,
    KUEUE_GROUP,
    KUEUE_JOB_UID_LABEL,
    KUEUE_VERSIONS,
    LABEL_RUN,
    PLURAL,
    VERSION,
)
from grpo_operator.cache import KINDS, CachedKind, ObjectCache
from grpo_operator.children.meta import RunRef

log = logging.getLogger(__name__)

# (connect, read) seconds for every request: a half-open connection fails the pass, which is
# retried with backoff, instead of hanging a reconcile worker while liveness stays green.
REQUEST_TIMEOUT = (5, 30)


# Creates of one child tried in a pass while its name is held at the create and free at the
# read (someone deleting it meanwhile).
CREATE_ATTEMPTS = 3
# Threads making the children of every pass at once (``Kube.concurrently``); the API client's
# connection pool must hold them besides the reconcile workers' own.
CREATE_THREADS = 8
# Objects per page of a sweep's listing: bounds both sides' memory per request. A Pod's
# metadata with its managedFields is several KiB of JSON, so a page is held whole in the
# operator while decoded; at a thousand runs a sweep costs a few more requests, not memory.
LIST_PAGE = 100


def decoded(_client: dynamic.DynamicClient, body: Any) -> Any:
    """The dynamic client's answer as decoded from its JSON (its ``serializer``). Its default,
    ``ResourceInstance``, wraps every field of every object in an object of its own and
    ``to_dict`` then copies it all back: a sweep's page of 500 Pods' metadata held about
    46 MiB that way at once (traced with a thousand runs), and every create paid the same.
    Passed per call, not set on the client: its discovery reads the default's attributes."""
    return body


class StaleStatus(Exception):
    """The run changed between the pass's read and its status write (another writer: a user's
    edit, or a second operator instance): the write was refused, and the pass must start again
    from what is stored now rather than apply a decision made on an older state."""


class ChildConflict(Exception):
    """An object holds a child's name but is not controlled by this run (made beforehand by
    someone else, or left by a deleted run of the same name that garbage collection has not
    removed yet). It is never used."""

    def __init__(self, obj: dict[str, Any], run_uid: str):
        meta = obj.get("metadata") or {}
        owner = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")),
                     None)
        held = (f"controlled by {owner.get('kind')} {owner.get('name')} (uid {owner.get('uid')})"
                if owner else "controlled by nothing")
        super().__init__(f"{obj.get('kind', 'object')} {meta.get('name')} exists but is {held}, "
                         f"not by this run (uid {run_uid}): it is not used; delete it or "
                         "wait for its owner's garbage collection")


def _controlled(obj: dict | None, run: RunRef) -> dict | None:
    """``obj`` when absent or ``run``'s; ChildConflict when its name holds someone else's."""
    if obj is not None and not controlled_by(obj, run.uid):
        raise ChildConflict(obj, run.uid)
    return obj


def controlled_by(obj: dict[str, Any], uid: str) -> bool:
    return any(r.get("controller") and r.get("uid") == uid
               for r in (obj.get("metadata") or {}).get("ownerReferences") or [])


def _controller_uid(obj: dict[str, Any]) -> str:
    return next(r["uid"] for r in obj["metadata"]["ownerReferences"] if r.get("controller"))


def _absent(e: ApiException) -> bool:
    return e.status == 404


def merge_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) taking ``old`` to ``new``: changed keys, and null for
    the keys ``new`` dropped (status fields that go away, such as terminal on a retry)."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            nested = merge_patch(before, value)
            if nested:
                patch[key] = nested
        elif value != before or key not in old:
            patch[key] = value
    return patch


class Kube:
    """Reads from the watch-fed cache, idempotent creates, deletes, status patches and Events.
    Reads that go to the API server are the exceptions: a run the cache is behind on, a child's
    name found taken at create, the user's PersistentVolumeClaims at acceptance, the periodic
    listings."""

    def __init__(self, api: client.ApiClient, cache: ObjectCache):
        self.api = api
        self.cache = cache
        # Core kinds go through the dynamic client: client.CoreV1Api imports its 327 models
        # (20 MiB of this process, measured), which dicts make no use of.
        self.custom = client.CustomObjectsApi(api)
        self._local = threading.local()  # requests made by this thread since the last take
        # Shared by every reconcile worker: the concurrent creates of their passes.
        self._pool = concurrent.futures.ThreadPoolExecutor(CREATE_THREADS,
                                                           thread_name_prefix="create")

    @functools.cached_property
    def dynamic(self) -> dynamic.DynamicClient:
        """Made at first use: it reads the API server's discovery documents."""
        return dynamic.DynamicClient(self.api)

    def resource(self, api_version: str, kind: str) -> dynamic.Resource:
        return self.dynamic.resources.get(api_version=api_version, kind=kind)

    def unserved(self, kinds: Iterable[CachedKind]) -> list[str]:
        """Those of ``kinds`` the API server does not serve (their CRD is not installed), as
        ``Kind (group/version)``."""
        missing = []
        for kind in kinds:
            try:
                self.resource(kind.api_version, kind.kind)
            except dynamic.exceptions.ResourceNotFoundError:
                missing.append(f"{kind.kind} ({kind.api_version})")
        return missing

    def _count(self, read: bool = False) -> None:
        counts = getattr(self._local, "counts", None) or [0, 0]
        counts[0] += 1
        counts[1] += read
        self._local.counts = counts

    def take_request_count(self) -> tuple[int, int]:
        """API requests this thread made since the last call, and how many of them were reads
        (a reconcile pass's cost)."""
        counts, self._local.counts = getattr(self._local, "counts", None) or [0, 0], [0, 0]
        return counts[0], counts[1]

    # -- runs --------------------------------------------------------------------------------

    def get_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The run as the cache holds it, or as stored when the cache is behind on it or does
        not hold it (gone, or never seen)."""
        cached = self.cache.get(KIND, namespace, name)
        if cached is not None and not self.cache.is_behind(KIND, namespace, name):
            return cached
        self._count(read=True)
        try:
            body = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as e:
            if _absent(e):
                return None
            raise
        if cached is None:
            self.cache.created(KIND, body)
        else:
            self.cache.read(KIND, body)
        return body

    def list_runs(self, namespace: str | None) -> list[dict[str, Any]]:
        """Every run in ``namespace`` (None: in all), whole."""
        self._count(read=True)
        return self.resource(API_VERSION, KIND).get(
            namespace=namespace, serializer=decoded, _request_timeout=REQUEST_TIMEOUT)["items"]

    # -- children ----------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict | None:
        """Read from the API server (not the cache)."""
        self._count(read=True)
        resource = self.resource(api_version, kind)
        try:
            return resource.get(name=name, namespace=namespace, serializer=decoded,
                                _request_timeout=REQUEST_TIMEOUT)
        except dynamic.exceptions.NotFoundError:
            return None

    def get_child(self, kind: str, run: RunRef, name: str) -> dict | None:
        """A child of ``run`` by name, from the cache; ChildConflict if that name holds
        someone else's."""
        return _controlled(self.cache.get(kind, run.namespace, name), run)

    def read_child(self, kind: str, run: RunRef, name: str) -> dict | None:
        """A child of ``run`` by name, read from the API server: for a decision the watch may
        lag (watches of different kinds keep no order between them); ChildConflict as
        ``get_child``."""
        return _controlled(self.get(KINDS[kind].api_version, kind, run.namespace, name), run)

    def pods(self, run: RunRef, labels: dict[str, str], controller_uid: str | None,
             ) -> list[dict[str, Any]]:
        """The run's cached pods carrying ``labels`` and controlled by the object of
        ``controller_uid`` (anyone may label a pod; only its controller is trusted)."""
        return [p for p in self.cache.of_run("Pod", run.namespace, run.name)
                if labels.items() <= (p["metadata"].get("labels") or {}).items()
                and (controller_uid is None or controlled_by(p, controller_uid))]

    def list_pods(self, run: RunRef, selector: str, controller_uid: str,
                  ) -> list[dict[str, Any]]:
        """Pods by label from the API server, not the cache: for a RayCluster made before its
        pods were labelled with their run (an operator upgraded under a running run)."""
        self._count(read=True)
        pods = self.resource("v1", "Pod").get(namespace=run.namespace, label_selector=selector,
                                              serializer=decoded,
                                              _request_timeout=REQUEST_TIMEOUT)
        return [p for p in pods["items"] if controlled_by(p, controller_uid)]

    def list_labelled(self, kind: CachedKind, namespace: str | None,
                      ) -> set[tuple[str, str, str]]:
        """Namespace, name and uid of every object of ``kind`` labelled ``grpo.dev/run`` in
        ``namespace`` (None: in all): metadata only, in pages (a sweep's listing)."""
        resource = self.resource(kind.api_version, kind.kind)
        found: set[tuple[str, str, str]] = set()
        token = None
        while True:
            self._count(read=True)
            page = resource.get(
                namespace=namespace, label_selector=LABEL_RUN, limit=LIST_PAGE, _continue=token,
                header_params={"Accept": "application/json;as=PartialObjectMetadataList;"
                               "g=meta.k8s.io;v=v1"},
                serializer=decoded, _request_timeout=REQUEST_TIMEOUT)
            for item in page.get("items") or ():
                meta = item["metadata"]
                found.add((meta.get("namespace") or "", meta["name"], meta["uid"]))
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return found

    def kueue_workload(self, namespace: str, job_uid: str) -> dict[str, Any] | None:
        """Kueue's Workload of the object ``job_uid`` (a queued RayCluster), read from the API
        server while Kueue holds the cluster (a waiting run's passes are few); None: none yet,
        or Kueue is not installed."""
        for version in KUEUE_VERSIONS:
            self._count(read=True)
            try:
                found = self.custom.list_namespaced_custom_object(
                    KUEUE_GROUP, version, namespace, "workloads",
                    label_selector=f"{KUEUE_JOB_UID_LABEL}={job_uid}",
                    _request_timeout=REQUEST_TIMEOUT)
            except ApiException as e:
                if e.status == 404:  # not served: an older Kueue, or none
                    continue
                raise
            return next((w for w in found.get("items") or () if controlled_by(w, job_uid)),
                        None)
        return None

    def create_if_absent(self, obj: dict[str, Any], expected: bool = False) -> bool:
        """Create the child ``obj`` unless the cache holds it; one of that name already there
        is left as it is (returns False) if the same run controls it, else ChildConflict. One
        deleted between the refused create and the read is created after all: the pass must
        not go on as if it existed.

        ``expected``: an earlier pass made the run's children (its status says so), so one the
        cache lacks — a Secret, never watched, after a restart, a takeover or a sweep — is most
        likely there: it is read first, one request where a refused create and a read are two.
        """
        meta, kind = obj["metadata"], obj["kind"]
        uid = _controller_uid(obj)
        cached = self.cache.get(kind, meta["namespace"], meta["name"])
        if cached is not None:
            if not controlled_by(cached, uid):
                raise ChildConflict(cached, uid)
            return False
        if expected and (existing := self.get(obj["apiVersion"], kind, meta["namespace"],
                                              meta["name"])) is not None:
            return self._found(kind, existing, uid)
        resource = self.resource(obj["apiVersion"], kind)
        for _ in range(CREATE_ATTEMPTS):
            self._count()
            try:
                made = resource.create(body=obj, namespace=meta["namespace"], serializer=decoded,
                                       _request_timeout=REQUEST_TIMEOUT)
                self.cache.created(kind, made)
                return True
            except dynamic.exceptions.ConflictError:
                pass
            # Made elsewhere (or by this process before a restart) and not delivered yet.
            existing = self.get(obj["apiVersion"], kind, meta["namespace"], meta["name"])
            if existing is not None:
                return self._found(kind, existing, uid)
        raise RuntimeError(f"{kind} {meta['name']} was there at each create and gone "
                           f"at each read ({CREATE_ATTEMPTS} times)")

    def _found(self, kind: str, existing: dict[str, Any], uid: str) -> bool:
        """A child already there: kept (and remembered) if the run controls it."""
        if not controlled_by(existing, uid):
            raise ChildConflict(existing, uid)
        self.cache.created(kind, existing)
        return False

    def concurrently(self, *calls: Callable[[], object]) -> None:
        """Make these requests (``create_if_absent``, ``ensure_config_map``...) at the same
        time: none depends on another, and the pass waits one round trip for them, not one
        each. Their requests count as the calling thread's; the first failure is raised once
        all have answered."""
        def call(fn: Callable[[], object]) -> tuple[tuple[int, int], Exception | None]:
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - raised by the caller, after the others
                return self.take_request_count(), e
            return self.take_request_count(), None

        counts = getattr(self._local, "counts", None) or [0, 0]
        errors = []
        for future in [self._pool.submit(call, fn) for fn in calls]:
            (requests, reads), error = future.result()
            counts[0] += requests
            counts[1] += reads
            errors.append(error)
        self._local.counts = counts
        if error := next((e for e in errors if e is not None), None):
            raise error

    def ensure_config_map(self, obj: dict[str, Any]) -> None:
        """Create the ConfigMap, or replace its data when it differs (the run config changes
        with each attempt)."""
        if self.create_if_absent(obj):
            return
        meta = obj["metadata"]
        current = self.cache.get("ConfigMap", meta["namespace"], meta["name"]) or {}
        if (current.get("data") or {}) != obj["data"]:
            self._count()
            patched = self.resource("v1", "ConfigMap").patch(
                name=meta["name"], namespace=meta["namespace"], body={"data": obj["data"]},
                content_type="application/merge-patch+json", serializer=decoded,
                _request_timeout=REQUEST_TIMEOUT)
            # Only the operator writes a run config: its answer is the newest there is.
            self.cache.patched("ConfigMap", patched)

    def delete(self, api_version: str, kind: str, namespace: str, name: str, *,
               propagation: str = "Background") -> None:
        """Delete with its dependents (a Job's pods go too); absent is fine."""
        self._count()
        resource = self.resource(api_version, kind)
        with contextlib.suppress(dynamic.exceptions.NotFoundError):
            resource.delete(name=name, namespace=namespace,
                            body={"propagationPolicy": propagation}, serializer=decoded,
                            _request_timeout=REQUEST_TIMEOUT)

    def delete_run(self, namespace: str, name: str) -> None:
        self._count()
        with contextlib.suppress(dynamic.exceptions.NotFoundError):
            self.resource(API_VERSION, KIND).delete(
                name=name, namespace=namespace, body={"propagationPolicy": "Background"},
                serializer=decoded, _request_timeout=REQUEST_TIMEOUT)

    def patch_status(self, namespace: str, name: str, status: dict[str, Any],
                     resource_version: str) -> str:
        """Merge-patch status (null removes a field) of the run as read at
        ``resource_version``: a run changed since is not written (``StaleStatus``). Returns
        the new resourceVersion."""
        self._count()
        try:
            stored = self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, name,
                {"metadata": {"resourceVersion": resource_version}, "status": status},
                _request_timeout=REQUEST_TIMEOUT)
        except ApiException as e:
            if e.status == 409:
                self.cache.wrote(KIND, namespace, name, None)
                raise StaleStatus(f"{namespace}/{name} is no longer at resourceVersion "
                                  f"{resource_version}") from None
            raise
        version = stored["metadata"]["resourceVersion"]
        self.cache.wrote(KIND, namespace, name, version)
        return version

    def event(self, run: RunRef, type_: str, reason: str, message: str) -> None:
        self._count()
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{run.name}.", "namespace": run.namespace},
            "involvedObject": {"apiVersion": API_VERSION, "kind": KIND, "name": run.name,
                               "namespace": run.namespace, "uid": run.uid},
            "type": type_, "reason": reason, "message": message[:1024],
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "source": {"component": "grpo-operator"},
            "reportingComponent": "grpo.dev/operator", "reportingInstance": "grpo-operator",
        }
        try:
            self.resource("v1", "Event").create(body=body, namespace=run.namespace,
                                                serializer=decoded,
                                                _request_timeout=REQUEST_TIMEOUT)
        except ApiException as e:  # events are best effort
            log.warning("event %s/%s not recorded: %s", reason, run.name,
                        json.loads(e.body or "{}").get("message", e.reason))
