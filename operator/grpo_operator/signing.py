"""The run's secrets, derived from one signing key the operator keeps in a Secret of its own
namespace.

A run's report key is ``HMAC-SHA256(signing key, "grpo.dev/report-key/v1/" + run UID)``, its
Ray token the same under "grpo.dev/ray-token/v1/". The operator writes them into the run's
report-key and auth Secrets, and recomputes the report key to verify a report, never reading
it back: a report-key Secret replaced in the run's namespace changes nothing the operator
trusts. A deleted Secret is made again with the same value, so the warm cluster's pods (which
read the token when they started) and a new driver still agree.

The signing key is made once, by whichever replica first finds it missing; a restart or a
second replica reads the same one, so a run's reports stay verifiable across operator
restarts and upgrades.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets

from kubernetes import dynamic
from kubernetes.client.rest import ApiException

from grpo_operator.kube import REQUEST_TIMEOUT, decoded

log = logging.getLogger(__name__)

SIGNING_SECRET_KEY = "signing_key"
_KEY_BYTES = 32


def _derive(signing_key: bytes, label: bytes, run_uid: str) -> bytes:
    return hmac.new(signing_key, label + run_uid.encode(), hashlib.sha256).digest()


def run_report_key(signing_key: bytes, run_uid: str) -> bytes:
    """The run's report key (bound to the run's UID: a recreated run of the same name gets
    another key, so the old run's reports never verify for it)."""
    return _derive(signing_key, b"grpo.dev/report-key/v1/", run_uid)


def run_ray_token(signing_key: bytes, run_uid: str) -> str:
    """The run's Ray auth token (URL-safe text, as Ray's token files hold)."""
    raw = _derive(signing_key, b"grpo.dev/ray-token/v1/", run_uid)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def load_or_create_signing_key(secret_api: dynamic.Resource, namespace: str, name: str) -> bytes:
    """The signing key from Secret ``namespace/name``, made first if there is none."""
    try:
        return _read(secret_api, namespace, name)
    except ApiException as e:
        if e.status != 404:
            raise
    body = {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/name": "grpo-operator"}},
        "data": {SIGNING_SECRET_KEY: base64.b64encode(secrets.token_bytes(_KEY_BYTES))
                 .decode()},
    }
    try:
        secret_api.create(body=body, namespace=namespace, serializer=decoded,
                          _request_timeout=REQUEST_TIMEOUT)
        log.info("created the report signing key in Secret %s/%s", namespace, name)
    except ApiException as e:
        if e.status != 409:  # another replica made it first: use that one
            raise
    return _read(secret_api, namespace, name)


def _read(secret_api: dynamic.Resource, namespace: str, name: str) -> bytes:
    secret = secret_api.get(name=name, namespace=namespace, serializer=decoded,
                            _request_timeout=REQUEST_TIMEOUT)
    encoded = (secret.get("data") or {}).get(SIGNING_SECRET_KEY)
    key = base64.b64decode(encoded) if encoded else b""
    if len(key) < _KEY_BYTES:
        raise ValueError(f"Secret {namespace}/{name} has no {SIGNING_SECRET_KEY} of at least "
                         f"{_KEY_BYTES} bytes")
    return key
