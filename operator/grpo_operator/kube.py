"""The one module that talks to the Kubernetes API for the operator."""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import threading
from typing import Any

from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

from grpo_operator.api.constants import API_VERSION, GROUP, KIND, PLURAL, VERSION
from grpo_operator.children.meta import RunRef

log = logging.getLogger(__name__)

# (connect, read) seconds for every request: a half-open connection fails the pass, which is
# retried with backoff, instead of hanging a reconcile worker while liveness stays green.
REQUEST_TIMEOUT = (5, 30)


# Creates of one child tried in a pass while its name is held at the create and free at the
# read (someone deleting it meanwhile).
CREATE_ATTEMPTS = 3


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
    """Reads by name, idempotent creates, deletes, status patches and Events."""

    def __init__(self, api: client.ApiClient):
        self.api = api
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.dynamic = dynamic.DynamicClient(api)
        self._local = threading.local()  # requests made by this thread since the last take

    def _count(self) -> None:
        self._local.requests = getattr(self._local, "requests", 0) + 1

    def take_request_count(self) -> int:
        """API requests this thread made since the last call (a reconcile pass's cost)."""
        count, self._local.requests = getattr(self._local, "requests", 0), 0
        return count

    def get_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._count()
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                            name, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as e:
            if _absent(e):
                return None
            raise

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict | None:
        self._count()
        resource = self.dynamic.resources.get(api_version=api_version, kind=kind)
        try:
            return resource.get(name=name, namespace=namespace,
                                _request_timeout=REQUEST_TIMEOUT).to_dict()
        except dynamic.exceptions.NotFoundError:
            return None

    def get_child(self, api_version: str, kind: str, run: RunRef, name: str) -> dict | None:
        """A child of ``run`` by name; ChildConflict if that name holds someone else's."""
        obj = self.get(api_version, kind, run.namespace, name)
        if obj is not None and not controlled_by(obj, run.uid):
            raise ChildConflict(obj, run.uid)
        return obj

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        self._count()
        pods = self.core.list_namespaced_pod(namespace, label_selector=selector,
                                             _request_timeout=REQUEST_TIMEOUT)
        return [self.api.sanitize_for_serialization(p) for p in pods.items]

    def create_if_absent(self, obj: dict[str, Any]) -> bool:
        """Create the child ``obj``; one of that name already there is left as it is (returns
        False) if the same run controls it, else ChildConflict. One deleted between the refused
        create and the read is created after all: the pass must not go on as if it existed."""
        meta = obj["metadata"]
        resource = self.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        uid = _controller_uid(obj)
        for _ in range(CREATE_ATTEMPTS):
            self._count()
            try:
                resource.create(body=obj, namespace=meta["namespace"],
                                _request_timeout=REQUEST_TIMEOUT)
                return True
            except dynamic.exceptions.ConflictError:
                pass
            existing = self.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
            if existing is None:
                continue
            if not controlled_by(existing, uid):
                raise ChildConflict(existing, uid)
            return False
        raise RuntimeError(f"{obj['kind']} {meta['name']} was there at each create and gone "
                           f"at each read ({CREATE_ATTEMPTS} times)")

    def ensure_config_map(self, obj: dict[str, Any]) -> None:
        """Create the ConfigMap, or replace its data when it differs (the run config changes
        with each attempt)."""
        if self.create_if_absent(obj):
            return
        meta = obj["metadata"]
        current = self.get("v1", "ConfigMap", meta["namespace"], meta["name"]) or {}
        if (current.get("data") or {}) != obj["data"]:
            self._count()
            self.core.patch_namespaced_config_map(meta["name"], meta["namespace"],
                                                  {"data": obj["data"]},
                                                  _request_timeout=REQUEST_TIMEOUT)

    def delete(self, api_version: str, kind: str, namespace: str, name: str, *,
               propagation: str = "Background") -> None:
        """Delete with its dependents (a Job's pods go too); absent is fine."""
        self._count()
        resource = self.dynamic.resources.get(api_version=api_version, kind=kind)
        with contextlib.suppress(dynamic.exceptions.NotFoundError):
            resource.delete(name=name, namespace=namespace,
                            body={"propagationPolicy": propagation},
                            _request_timeout=REQUEST_TIMEOUT)

    def delete_run(self, namespace: str, name: str) -> None:
        self._count()
        with contextlib.suppress(dynamic.exceptions.NotFoundError):
            self.dynamic.resources.get(api_version=API_VERSION, kind=KIND).delete(
                name=name, namespace=namespace, body={"propagationPolicy": "Background"},
                _request_timeout=REQUEST_TIMEOUT)

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
                raise StaleStatus(f"{namespace}/{name} is no longer at resourceVersion "
                                  f"{resource_version}") from None
            raise
        return stored["metadata"]["resourceVersion"]

    def event(self, run: RunRef, type_: str, reason: str, message: str) -> None:
        self._count()
        now = datetime.datetime.now(datetime.UTC)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{run.name}.", namespace=run.namespace),
            involved_object=client.V1ObjectReference(
                api_version=API_VERSION, kind=KIND, name=run.name, namespace=run.namespace,
                uid=run.uid,
            ),
            type=type_, reason=reason, message=message[:1024],
            first_timestamp=now, last_timestamp=now, count=1,
            source=client.V1EventSource(component="grpo-operator"),
            reporting_component="grpo.dev/operator", reporting_instance="grpo-operator",
        )
        try:
            self.core.create_namespaced_event(run.namespace, body,
                                              _request_timeout=REQUEST_TIMEOUT)
        except ApiException as e:  # events are best effort
            log.warning("event %s/%s not recorded: %s", reason, run.name,
                        json.loads(e.body or "{}").get("message", e.reason))
