"""Session-wide fixtures: one local control plane for the whole test run (starting it costs
seconds; building its binaries, once per machine, costs much more)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from localcluster import LocalCluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster.start() as local:
        yield local


@pytest.fixture(scope="session")
def k8s_api(cluster: LocalCluster):
    client = cluster.api_client()
    yield client
    client.close()
