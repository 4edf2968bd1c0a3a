"""Session-wide fixtures: one local control plane for the whole test run (starting it costs
seconds; building its binaries, once per machine, costs much more), and fresh namespaces on it."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from localcluster import LocalCluster
from tests.waiting import wait_for


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster.start() as local:
        yield local


@pytest.fixture(scope="session")
def k8s_api(cluster: LocalCluster):
    api = cluster.api_client()
    yield api
    api.close()


@pytest.fixture(scope="session")
def kstatus(cluster: LocalCluster) -> Callable[[dict], tuple[str, str]]:
    """(status, message) that kstatus, the library Flux, kpt and cli-utils judge a resource
    with, computes for an object as read from the API server."""
    def judge(obj: dict) -> tuple[str, str]:
        done = subprocess.run([cluster.tools.bin("kstatus")], input=json.dumps([obj]),
                              capture_output=True, text=True, check=True, timeout=30)
        result = json.loads(done.stdout)
        return result["status"], result["message"]
    return judge


def new_namespace(api: client.ApiClient, prefix: str) -> str:
    """A fresh namespace whose default ServiceAccount exists (pods need it to be admitted)."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    wait_for(lambda: core.read_namespaced_service_account("default", name), 30,
             what="the default ServiceAccount")
    return name


def delete_namespace(api: client.ApiClient, name: str) -> None:
    """Let the namespace go with everything in it (not waited for): a RayCluster left behind
    would keep its real Ray nodes running for the rest of the session."""
    client.CoreV1Api(api).delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def namespace(k8s_api) -> Iterator[str]:
    name = new_namespace(k8s_api, "t")
    yield name
    delete_namespace(k8s_api, name)
