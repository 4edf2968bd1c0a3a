from __future__ import annotations

import urllib.parse
from collections.abc import Iterator

import pytest

from localcluster.prometheus import PrometheusServer, pod_monitor_scrape_config
from tests.charts.test_chart_render import by_kind, render
from tests.conftest import delete_namespace, new_namespace
from tests.operator.conftest import METRICS_URL
from tests.operator.lifecycle.runs import Runs


@pytest.fixture
def runs(k8s_api, operator, kstatus, tmp_path) -> Iterator[Runs]:
    """A fresh namespace watched by the running operator, with input dirs under tmp_path;
    deleted with its runs afterwards."""
    for sub in ("model", "data", "checkpoints"):
        (tmp_path / sub).mkdir()
    name = new_namespace(k8s_api, "op")
    yield Runs(k8s_api, name, kstatus)
    delete_namespace(k8s_api, name)


@pytest.fixture(scope="session")
def prometheus(cluster, operator, tmp_path_factory) -> Iterator[PrometheusServer]:
    """A real Prometheus scraping, every second, the operator and every driver pod, the latter
    found through Kubernetes pod discovery configured as the chart's PodMonitor is."""
    (monitor,) = by_kind(render(cluster.tools.bin("helm"), "--set",
                                "metrics.podMonitor.enabled=true"), "PodMonitor")
    operator_target = urllib.parse.urlsplit(METRICS_URL).netloc
    config = {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [
            {"job_name": "grpo-operator", "honor_labels": True,
             "static_configs": [{"targets": [operator_target]}]},
            pod_monitor_scrape_config(monitor, cluster.kubeconfig),
        ],
    }
    with PrometheusServer(tmp_path_factory.mktemp("prometheus"), config) as server:
        yield server
