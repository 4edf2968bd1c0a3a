"""The GRPORun CRD installed once on the local control plane, and helpers to talk to it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from grpo_operator.api.constants import GROUP, PLURAL, VERSION


@dataclass
class Outcome:
    """What the API server said to a request: the object, or the refusal's message."""

    accepted: bool
    body: dict[str, Any]
    message: str
    status: int


class GRPORuns:
    """GRPORuns in one namespace, through the admin's client, with strict field validation."""

    def __init__(self, api: client.ApiClient, namespace: str):
        self.api = client.CustomObjectsApi(api)
        self.namespace = namespace

    def _call(self, fn, *args, **kwargs) -> Outcome:
        try:
            body = fn(GROUP, VERSION, self.namespace, PLURAL, *args, **kwargs)
        except ApiException as exc:
            try:
                message = json.loads(exc.body).get("message", exc.body)
            except (TypeError, ValueError):
                message = str(exc.body)
            return Outcome(False, {}, message, exc.status)
        return Outcome(True, body, "", 200)

    def create(self, manifest: dict[str, Any], *, dry_run: bool = False) -> Outcome:
        kwargs = {"field_validation": "Strict"}
        if dry_run:
            kwargs["dry_run"] = "All"
        return self._call(self.api.create_namespaced_custom_object, manifest, **kwargs)

    def get(self, name: str) -> dict[str, Any]:
        return self.api.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

    def patch(self, name: str, body: dict[str, Any]) -> Outcome:
        """A JSON merge patch of the main resource (null removes a field)."""
        return self._call(
            self.api.patch_namespaced_custom_object, name, body, field_validation="Strict"
        )

    def patch_status(self, name: str, body: dict[str, Any]) -> Outcome:
        """A JSON merge patch through the status subresource."""
        return self._call(
            self.api.patch_namespaced_custom_object_status, name, body, field_validation="Strict"
        )


@pytest.fixture(scope="module")
def runs(k8s_api, grporun_crd) -> Iterator[GRPORuns]:
    """A fresh namespace per test module (deleted afterwards) and a GRPORun client for it."""
    name = f"grpo-api-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(k8s_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield GRPORuns(k8s_api, name)
    core.delete_namespace(name)
