from __future__ import annotations

import uuid

import pytest
from kubernetes import client

from tests.operator.lifecycle.runs import Runs
from tests.waiting import wait_for


@pytest.fixture
def runs(k8s_api, operator, tmp_path) -> Runs:
    """A fresh namespace watched by the running operator, with input dirs under tmp_path."""
    name = f"op-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(k8s_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    wait_for(lambda: core.read_namespaced_service_account("default", name), 30,
             what="the default ServiceAccount")
    for sub in ("model", "data", "checkpoints"):
        (tmp_path / sub).mkdir()
    return Runs(k8s_api, name)
