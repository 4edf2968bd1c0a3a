"""The run's own identity: a ServiceAccount that may read and patch only its report
ConfigMap, the Secret holding its Ray cluster's auth token, and the Secret holding the key
that signs its reports."""

from __future__ import annotations

import base64
from typing import Any

from grpo_operator.api.ray_job import REPORT_KEY_SECRET_KEY, TOKEN_SECRET_KEY
from grpo_operator.children.meta import RunRef, child_metadata
from grpo_operator.naming import ChildNames


def service_account(run: RunRef) -> dict[str, Any]:
    names = ChildNames(run.name)
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": child_metadata(run, names.service_account, "identity"),
        # Only the driver pod opts in to a token; the Ray pods never see one.
        "automountServiceAccountToken": False,
    }


def role(run: RunRef) -> dict[str, Any]:
    names = ChildNames(run.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": child_metadata(run, names.role, "identity"),
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [names.report_config_map],
                "verbs": ["get", "patch"],
            }
        ],
    }


def role_binding(run: RunRef) -> dict[str, Any]:
    names = ChildNames(run.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": child_metadata(run, names.role_binding, "identity"),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": names.role,
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": names.service_account, "namespace": run.namespace}
        ],
    }


def auth_secret(run: RunRef, token: str) -> dict[str, Any]:
    """The Ray token-authentication Secret (``token``: derived by the caller from the run)."""
    return _secret(run, ChildNames(run.name).auth_secret, "ray-auth", TOKEN_SECRET_KEY,
                   token.encode())


def report_key_secret(run: RunRef, key: bytes) -> dict[str, Any]:
    """The report-signing key's Secret (``key``: derived by the caller from the run)."""
    return _secret(run, ChildNames(run.name).report_key_secret, "report-key",
                   REPORT_KEY_SECRET_KEY, key)


def _secret(run: RunRef, name: str, component: str, key: str, value: bytes) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": child_metadata(run, name, component),
        "type": "Opaque",
        "data": {key: base64.b64encode(value).decode()},
    }
