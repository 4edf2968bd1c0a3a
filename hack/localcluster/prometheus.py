"""A real Prometheus and promtool for the tests (built from its Go module by
``hack/build-prometheus.sh``), so that what the operator and trainer expose is proved scrapeable,
lint-clean and discoverable the way a cluster's Prometheus would see it, not only parsed by
``prometheus_client``'s own reader.

    with PrometheusServer(root, {"scrape_configs": [...]}) as prom:
        prom.wait_for('grpo_runs{phase="Running"}', timeout=30)
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from .binaries import built
from .processes import Managed, Supervisor, free_port


def ensure_built() -> Path:
    """Build (once) and return the directory holding ``prometheus`` and ``promtool``."""
    return built("build-prometheus.sh") / "bin"


class PrometheusError(RuntimeError):
    """The HTTP API answered with ``status: error``; the message carries Prometheus's own."""


class PrometheusServer:
    """One Prometheus process scraping what ``config`` (a whole prometheus.yml, as data) says,
    with its config and TSDB under ``root``. Use as a context manager (start, wait until ready,
    stop) or call ``start``/``wait_ready``/``stop``."""

    def __init__(self, root: Path, config: dict, bin_dir: Path | None = None) -> None:
        self.root = root
        self.config = config
        self.bin_dir = bin_dir or ensure_built()
        self.url = ""
        self._supervisor = Supervisor(root / "logs")
        self._process: Managed | None = None

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        config_file = self.root / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(self.config, sort_keys=False))
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self._process = self._supervisor.start("prometheus", [
            str(self.bin_dir / "prometheus"),
            f"--config.file={config_file}",
            f"--storage.tsdb.path={self.root / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ])

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until /-/ready answers 200; fails early, with the log's tail, if Prometheus exits
        (a config it rejects, say)."""
        assert self._process is not None, "start() first"
        self._supervisor.wait_until(
            self._process, lambda: _get(f"{self.url}/-/ready")[0] == 200, "ready", timeout
        )

    def stop(self) -> None:
        self._supervisor.stop_all()
        self._process = None

    def __enter__(self) -> PrometheusServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        """The series an instant query of ``expr`` returns now (or at Unix time ``at``): each
        ``{"metric": {labels}, "value": [time, "value"]}``. Only vector results: a scalar or
        range is a caller's mistake here."""
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        data = self._api("/api/v1/query", params, what=f"query {expr!r}")
        if data["resultType"] != "vector":
            raise PrometheusError(f"query {expr!r} gives a {data['resultType']}, not a vector")
        return data["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        """The series of ``expr`` evaluated every ``step`` seconds from ``start`` to ``end``:
        each ``{"metric": {labels}, "values": [[time, "value"], ...]}`` — what a target gone
        since (a finished driver) still shows."""
        data = self._api("/api/v1/query_range", {"query": expr, "start": f"{start:.3f}",
                                                 "end": f"{end:.3f}", "step": f"{step:g}"},
                         what=f"query_range {expr!r}")
        return data["result"]

    def targets(self) -> list[dict]:
        """The active scrape targets, each with its ``labels``, ``health`` and ``lastError``."""
        return self._api("/api/v1/targets", {"state": "active"}, what="targets")["activeTargets"]

    def wait_for(self, expr: str, timeout: float = 30.0, interval: float = 0.5) -> list[dict]:
        """Poll ``query(expr)`` until it returns at least one series, and return them. On
        timeout the error lists every target's health and last scrape error, and how many
        discovered targets relabeling dropped: why a series is missing is nearly always there."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if result:
                return result
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"no series for {expr!r} after {timeout:.0f}s; {self._targets_report()}"
                )
            time.sleep(interval)

    def _targets_report(self) -> str:
        data = self._api("/api/v1/targets", {}, what="targets")
        lines = [
            f"  {t['scrapeUrl']} {t['health']} lastError={t['lastError']!r} labels={t['labels']}"
            for t in data["activeTargets"]
        ]
        return (f"{len(lines)} active targets, {len(data['droppedTargets'])} discovered and "
                "dropped by relabeling:\n" + "\n".join(lines))

    def _api(self, path: str, params: dict[str, str], *, what: str) -> dict:
        status, body = _get(f"{self.url}{path}?{urllib.parse.urlencode(params)}")
        try:
            answer = json.loads(body)
        except ValueError:
            raise PrometheusError(f"{what}: HTTP {status}: {body[:500]!r}") from None
        if answer.get("status") != "success":
            raise PrometheusError(f"{what}: {answer.get('errorType')}: {answer.get('error')}")
        return answer["data"]


def _get(url: str) -> tuple[int, str]:
    """Status and body of a GET; an HTTP error status is an answer too (the API explains its
    400s in the body)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def check_metrics(promtool: Path, exposition: str) -> list[str]:
    """The problems ``promtool check metrics`` finds in a text exposition, one per line, empty
    when clean. promtool exits 0 when clean and 3 with lint problems (printed on stderr);
    anything else (1: the text does not parse) raises ValueError with its message."""
    done = subprocess.run([str(promtool), "check", "metrics"], input=exposition,
                          capture_output=True, text=True, timeout=60)
    if done.returncode == 0:
        return []
    if done.returncode == 3:
        return done.stderr.splitlines()
    raise ValueError(f"promtool check metrics exited {done.returncode}: {done.stderr.strip()}")


_SPEC_FIELDS = {"selector", "namespaceSelector", "podMetricsEndpoints"}
_SELECTOR_FIELDS = {"matchLabels"}
_NAMESPACE_SELECTOR_FIELDS = {"any", "matchNames"}
_ENDPOINT_FIELDS = {"port", "path", "interval", "scrapeTimeout", "honorLabels"}


def pod_monitor_scrape_config(pod_monitor: dict, kubeconfig: Path, interval: str = "1s") -> dict:
    """The scrape config prometheus-operator generates for a ``monitoring.coreos.com/v1``
    PodMonitor (``generatePodMonitorConfig`` in its ``pkg/prometheus/promcfg.go``, one shard,
    no scrape classes), discovering pods through ``kubeconfig``'s API server.

    ``interval`` replaces the endpoint's interval and its scrapeTimeout (which may not exceed
    the interval): tests cannot wait out a 30s scrape. A field this
    translation does not handle raises ValueError naming it, so that nothing the chart asks of
    Prometheus is silently left out of what the tests exercise. A PodMonitor without a namespace
    counts as in ``default``, where the API server would put it."""
    if (pod_monitor.get("apiVersion"), pod_monitor.get("kind")) != (
        "monitoring.coreos.com/v1", "PodMonitor"
    ):
        raise ValueError("not a monitoring.coreos.com/v1 PodMonitor")
    name = pod_monitor["metadata"]["name"]
    namespace = pod_monitor["metadata"].get("namespace", "default")
    spec = pod_monitor["spec"]
    _only(spec, _SPEC_FIELDS, "spec")
    selector = spec.get("selector", {})
    _only(selector, _SELECTOR_FIELDS, "spec.selector")
    namespace_selector = spec.get("namespaceSelector", {})
    _only(namespace_selector, _NAMESPACE_SELECTOR_FIELDS, "spec.namespaceSelector")
    endpoints = spec.get("podMetricsEndpoints", [])
    if len(endpoints) != 1:
        raise ValueError(f"spec.podMetricsEndpoints: {len(endpoints)} endpoints, handled: one")
    endpoint = endpoints[0]
    _only(endpoint, _ENDPOINT_FIELDS, "spec.podMetricsEndpoints[0]")

    sd_config: dict = {"role": "pod"}
    if not namespace_selector.get("any"):  # any: no namespaces, which means all of them
        names = namespace_selector.get("matchNames") or [namespace]
        sd_config["namespaces"] = {"names": list(names)}
    sd_config["kubeconfig_file"] = str(kubeconfig)

    relabelings: list[dict] = [
        {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
        # Completed pods keep their IPs in the API but serve nothing.
        {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"],
         "regex": "(Failed|Succeeded)"},
    ]
    match_labels = selector.get("matchLabels", {})
    for key in sorted(match_labels):
        label = _sanitize(key)
        relabelings.append({
            "action": "keep",
            "source_labels": [f"__meta_kubernetes_pod_label_{label}",
                              f"__meta_kubernetes_pod_labelpresent_{label}"],
            "regex": f"({match_labels[key]});true",
        })
    port = endpoint.get("port")
    if port:
        relabelings.append({"action": "keep",
                            "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                            "regex": port})
    relabelings += [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"target_label": "job", "replacement": f"{namespace}/{name}"},
    ]
    if port:
        relabelings.append({"target_label": "endpoint", "replacement": port})

    config: dict = {
        "job_name": f"podMonitor/{namespace}/{name}/0",
        "honor_labels": bool(endpoint.get("honorLabels", False)),
        "kubernetes_sd_configs": [sd_config],
        "scrape_interval": interval,
        "scrape_timeout": interval,
    }
    if endpoint.get("path"):
        config["metrics_path"] = endpoint["path"]
    config["relabel_configs"] = relabelings
    return config


def _only(fields: dict, handled: set[str], where: str) -> None:
    unknown = sorted(set(fields) - handled)
    if unknown:
        raise ValueError(f"{where}: {', '.join(unknown)} not handled (only {sorted(handled)})")


def _sanitize(label_name: str) -> str:
    """A Kubernetes label name as Prometheus's meta label spells it."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", label_name)
