"""The harness's Prometheus and promtool are the real ones: Prometheus scrapes a
``prometheus_client`` server and answers PromQL, reports its errors and its targets' health;
promtool lints expositions; a PodMonitor becomes the scrape config prometheus-operator would
write for it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, start_http_server

from localcluster.processes import free_port
from localcluster.prometheus import (
    PrometheusError,
    PrometheusServer,
    check_metrics,
    ensure_built,
    pod_monitor_scrape_config,
)
from tests.conftest import delete_namespace, new_namespace
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

DRIVERS = yaml.safe_load("""
apiVersion: monitoring.coreos.com/v1
kind: PodMonitor
metadata: {name: grpo-drivers}
spec:
  selector: {matchLabels: {grpo.dev/role: driver}}
  namespaceSelector: {any: true}
  podMetricsEndpoints:
    - port: metrics
      path: /metrics
      interval: 30s
      scrapeTimeout: 10s
      honorLabels: true
""")


@pytest.fixture(scope="module")
def bin_dir() -> Path:
    return ensure_built()


@pytest.fixture(scope="module")
def app() -> Iterator[tuple[str, CollectorRegistry]]:
    """A ``prometheus_client`` HTTP server on a loopback port: (address, its registry)."""
    registry = CollectorRegistry()
    port = free_port()
    server, thread = start_http_server(port, "127.0.0.1", registry=registry)
    yield f"127.0.0.1:{port}", registry
    server.shutdown()
    thread.join(10)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory, bin_dir, app) -> Iterator[PrometheusServer]:
    """Scraping the app every second, and a port where nothing listens (job ``gone``)."""
    config = {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [
            {"job_name": "app", "static_configs": [{"targets": [app[0]]}]},
            {"job_name": "gone", "static_configs": [{"targets": [f"127.0.0.1:{free_port()}"]}]},
        ],
    }
    with PrometheusServer(tmp_path_factory.mktemp("prometheus"), config, bin_dir) as prom:
        yield prom


def test_prometheus_scrapes_the_app_and_answers_promql(prometheus, app):
    address, registry = app
    depth = Gauge("grpo_test_queue_depth", "Items queued.", ["pool"], registry=registry)
    depth.labels(pool="rollout").set(3)
    depth.labels(pool="train").set(7)
    steps = Counter("grpo_test_steps", "Steps done.", ["run"], registry=registry)
    steps.labels(run="r1").inc(5)

    [series] = prometheus.wait_for('grpo_test_queue_depth{pool="train"}')
    assert series["metric"] == {"__name__": "grpo_test_queue_depth", "pool": "train",
                                "job": "app", "instance": address}
    assert float(series["value"][1]) == 7
    [total] = prometheus.wait_for("sum(grpo_test_queue_depth)")
    assert float(total["value"][1]) == 10
    [counted] = prometheus.wait_for('grpo_test_steps_total{run="r1"}')
    assert float(counted["value"][1]) == 5


def test_targets_report_health_and_the_scrape_error(prometheus):
    def scraped() -> list[dict] | None:
        targets = prometheus.targets()
        return targets if all(t["health"] != "unknown" for t in targets) else None

    by_job = {t["labels"]["job"]: t for t in wait_for(scraped, 30, what="both targets scraped")}
    assert by_job["app"]["health"] == "up"
    assert by_job["gone"]["health"] == "down"
    assert "connection refused" in by_job["gone"]["lastError"]


def test_a_bad_expression_raises_with_prometheus_message(prometheus):
    with pytest.raises(PrometheusError, match="bad_data: .*parse error"):
        prometheus.query("sum(")
    with pytest.raises(PrometheusError, match="gives a scalar, not a vector"):
        prometheus.query("1 + 1")


def test_wait_for_times_out_naming_each_target_and_its_last_error(prometheus):
    with pytest.raises(TimeoutError) as timed_out:
        prometheus.wait_for("grpo_never_exported", timeout=2)
    message = str(timed_out.value)
    assert "no series for 'grpo_never_exported' after 2s" in message
    assert "2 active targets" in message
    assert "down lastError=" in message and "connection refused" in message


def test_promtool_passes_what_prometheus_client_writes(bin_dir):
    registry = CollectorRegistry()
    Counter("grpo_test_steps", "Steps done.", ["run"], registry=registry).labels(run="a").inc()
    Gauge("grpo_test_queue_depth", "Items queued.", registry=registry).set(2)
    assert check_metrics(bin_dir / "promtool", generate_latest(registry).decode()) == []


@pytest.mark.parametrize(("exposition", "problem"), [
    ("# HELP steps Steps.\n# TYPE steps counter\nsteps 1\n",
     'steps counter metrics should have "_total" suffix'),
    ("# HELP queueDepth Depth.\n# TYPE queueDepth gauge\nqueueDepth 1\n",
     "queueDepth metric names should be written in 'snake_case' not 'camelCase'"),
    ("# TYPE depth gauge\ndepth 1\n", "depth no help text"),
    ("# HELP lag_milliseconds Lag.\n# TYPE lag_milliseconds gauge\nlag_milliseconds 1\n",
     'lag_milliseconds use base unit "seconds" instead of "milliseconds"'),
])
def test_promtool_names_each_lint_problem(bin_dir, exposition, problem):
    assert check_metrics(bin_dir / "promtool", exposition) == [problem]


def test_promtool_rejects_text_that_does_not_parse(bin_dir):
    with pytest.raises(ValueError, match="exited 1: .*text format parsing error"):
        check_metrics(bin_dir / "promtool", "depth{{{ 1\n")


def test_pod_monitor_becomes_prometheus_operators_scrape_config():
    config = pod_monitor_scrape_config(DRIVERS, Path("/k/kubeconfig"))
    assert config == {
        "job_name": "podMonitor/default/grpo-drivers/0",
        "honor_labels": True,
        # namespaceSelector.any: no namespaces, which Prometheus reads as all of them.
        "kubernetes_sd_configs": [{"role": "pod", "kubeconfig_file": "/k/kubeconfig"}],
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "metrics_path": "/metrics",
        "relabel_configs": [
            {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
            {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"],
             "regex": "(Failed|Succeeded)"},
            {"action": "keep",
             "source_labels": ["__meta_kubernetes_pod_label_grpo_dev_role",
                               "__meta_kubernetes_pod_labelpresent_grpo_dev_role"],
             "regex": "(driver);true"},
            {"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"],
             "regex": "metrics"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"],
             "target_label": "container"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"target_label": "job", "replacement": "default/grpo-drivers"},
            {"target_label": "endpoint", "replacement": "metrics"},
        ],
    }


def _monitor(**spec) -> dict:
    return {**DRIVERS, "metadata": {"name": "m", "namespace": "ns1"},
            "spec": {**DRIVERS["spec"], **spec}}


def test_pod_monitor_namespaces_are_the_named_ones_or_its_own():
    named = pod_monitor_scrape_config(_monitor(namespaceSelector={"matchNames": ["a", "b"]}),
                                      Path("k"))
    assert named["kubernetes_sd_configs"][0]["namespaces"] == {"names": ["a", "b"]}
    own = pod_monitor_scrape_config(_monitor(namespaceSelector={}), Path("k"))
    assert own["kubernetes_sd_configs"][0]["namespaces"] == {"names": ["ns1"]}
    assert own["job_name"] == "podMonitor/ns1/m/0"


@pytest.mark.parametrize(("spec", "named"), [
    ({"podTargetLabels": ["app"]}, "spec: podTargetLabels not handled"),
    ({"selector": {"matchExpressions": []}}, "spec.selector: matchExpressions not handled"),
    ({"podMetricsEndpoints": [{"port": "metrics", "scheme": "https"}]},
     r"spec.podMetricsEndpoints\[0\]: scheme not handled"),
    ({"podMetricsEndpoints": [{"port": "a"}, {"port": "b"}]}, "2 endpoints, handled: one"),
])
def test_pod_monitor_fields_not_translated_are_refused_by_name(spec, named):
    with pytest.raises(ValueError, match=named):
        pod_monitor_scrape_config(_monitor(**spec), Path("k"))


def test_prometheus_discovers_the_pods_a_pod_monitor_selects(request, bin_dir, tmp_path):
    monitor = _monitor(selector={"matchLabels": {"app.kubernetes.io/name": "scraped"}},
                       namespaceSelector={})
    probe = tmp_path / "probe.yml"
    probe.write_text(yaml.safe_dump(
        {"scrape_configs": [pod_monitor_scrape_config(monitor, tmp_path / "kubeconfig")]}))
    checked = subprocess.run([str(bin_dir / "promtool"), "check", "config", str(probe)],
                             capture_output=True, text=True)
    # (Debian's 2.42 build, for one, has no Kubernetes discovery: "field kubernetes_sd_configs
    # not found".)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    cluster = request.getfixturevalue("cluster")  # only now: starting it costs seconds
    api = cluster.api_client()
    namespace = new_namespace(api, "prom")
    try:
        monitor["metadata"]["namespace"] = namespace
        for name, labels in [("chosen", {"app.kubernetes.io/name": "scraped"}),
                             ("other", {"app.kubernetes.io/name": "ignored"})]:
            client.CoreV1Api(api).create_namespaced_pod(namespace, client.V1Pod(
                metadata=client.V1ObjectMeta(name=name, labels=labels),
                spec=client.V1PodSpec(containers=[client.V1Container(
                    name="app", image="app",
                    ports=[client.V1ContainerPort(name="metrics", container_port=9000)])]),
            ))
        config = {"scrape_configs": [pod_monitor_scrape_config(monitor, cluster.kubeconfig)]}
        with PrometheusServer(tmp_path / "prometheus", config, bin_dir) as prom:
            [target] = wait_for(prom.targets, 30, what="the selected pod as a target")
        assert {k: target["labels"][k] for k in ("namespace", "pod", "container", "job",
                                                "endpoint")} == {
            "namespace": namespace, "pod": "chosen", "container": "app",
            "job": f"{namespace}/m", "endpoint": "metrics"}
    finally:
        delete_namespace(api, namespace)
        api.close()
