"""Kubeconfig files for the admin and the control-plane components."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from .pki import CertPair


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write(
    path: Path,
    server: str,
    ca_cert: Path,
    *,
    user: str,
    client: CertPair | None = None,
    token: str | None = None,
) -> Path:
    """Write a single-context kubeconfig with embedded credentials (a client cert or a token)."""
    credentials: dict[str, str] = {}
    if client is not None:
        credentials["client-certificate-data"] = _b64(client.cert)
        credentials["client-key-data"] = _b64(client.key)
    if token is not None:
        credentials["token"] = token
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_cert)},
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
