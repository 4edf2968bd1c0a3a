from __future__ import annotations

import uuid

import pytest
from kubernetes import client

from tests.waiting import wait_for


@pytest.fixture
def namespace(k8s_api) -> str:
    """A fresh namespace whose default ServiceAccount exists (pods need it to be admitted)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(k8s_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    wait_for(lambda: core.read_namespaced_service_account("default", name), 30,
             what="the default ServiceAccount")
    return name
