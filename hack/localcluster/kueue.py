"""The real Kueue controller manager in the local cluster (built from its Go module by
``hack/build-kueue.sh``), started out of cluster as KubeRay is:

    manager = start_kueue(cluster)   # CRDs, webhooks, the manager; returns once it admits

It runs with the RayCluster and Job integrations, as docs/kueue.md tells users to configure it,
and ``manageJobsWithoutQueueName`` off (Kueue's default), so it acts only on objects that carry a
queue label. Its webhooks are the release's own manifests with one change: the API server
reaches them at the manager's local port (``clientConfig.url``) instead of through a Service, on
a serving certificate of the cluster's CA. Only the webhooks of what the manager serves (its own
kinds and the two integrations) are registered: one it does not serve would fail every create
of its kind (``failurePolicy: Fail``). The visibility API server is off (no aggregated API here).
"""

from __future__ import annotations

import base64
import time
from pathlib import Path

import yaml

from . import components, mountns, pki
from .binaries import built
from .cluster import LocalCluster
from .components import component_kubeconfig, http_ok
from .podspec import Mount
from .processes import Managed, free_port

# Webhook paths of what the manager serves with these integrations (the rest of the release's
# manifest is for frameworks left off).
SERVED_PATH_PARTS = ("kueue-x-k8s-io", "ray-io-v1-raycluster", "batch-v1-job")
INTEGRATIONS = ["batch/job", "ray.io/raycluster"]
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
METRICS_CERT_PATH = "/etc/kueue/metrics/certs"


def ensure_built() -> Path:
    """Build (once) and return the release directory: ``bin/kueue``, ``crds/``,
    ``webhooks.yaml``."""
    return built("build-kueue.sh")


def webhook_configurations(manifest: str, base_url: str, ca_bundle: str) -> list[dict]:
    """The release's webhook configurations, served at ``base_url`` and limited to what the
    manager serves, under names of their own (``kueue-…``)."""
    configs = []
    for config in yaml.safe_load_all(manifest):
        if not config:
            continue
        hooks = []
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            if any(part in path for part in SERVED_PATH_PARTS):
                hooks.append({**hook, "clientConfig": {"url": base_url + path,
                                                       "caBundle": ca_bundle}})
        configs.append({**config, "metadata": {"name": "kueue-" + config["metadata"]["name"]},
                        "webhooks": hooks})
    return configs


def manager_config(webhook_port: int, probe_port: int, metrics_port: int,
                   cert_dir: Path) -> dict:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        # The certificates are the cluster CA's (below), not Kueue's self-rotated ones, which
        # it would inject into a webhook Service that does not exist here.
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": INTEGRATIONS},
    }


def start_kueue(cluster: LocalCluster, timeout: float = 90) -> Managed:
    release = ensure_built()
    root = cluster.root / "kueue"
    cert_dir = root / "certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    serving = pki.issue_serving(cluster.pki, "kueue-webhook")
    (cert_dir / "tls.crt").write_bytes(serving.cert.read_bytes())
    (cert_dir / "tls.key").write_bytes(serving.key.read_bytes())
    for crd in sorted((release / "crds").glob("*.yaml")):
        cluster.install_crd(crd)
    cluster.kubectl("create", "namespace", "kueue-system")

    webhook_port, probe_port = free_port(), free_port()
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump(manager_config(webhook_port, probe_port, free_port(),
                                                    cert_dir)))
    kubeconfig_path = component_kubeconfig(
        components.Context(cluster.tools, cluster.supervisor, cluster.pki, cluster.root),
        cluster.server, "kueue")
    # Without its own certificate management Kueue reads its metrics server's certificate from
    # a fixed path, where its Deployment mounts a Secret: a mount namespace puts ours there.
    metrics_certs = [Mount(cert_dir, METRICS_CERT_PATH, read_only=True)]
    cluster.mountpoints.ensure(metrics_certs)
    process = cluster.supervisor.start(
        "kueue",
        mountns.wrap([str(release / "bin" / "kueue"), f"--config={config}",
                      "--feature-gates=VisibilityOnDemand=false", "--zap-log-level=2"],
                     metrics_certs),
        env={"KUBECONFIG": str(kubeconfig_path)},
    )
    cluster.supervisor.wait_until(
        process, lambda: http_ok(f"http://127.0.0.1:{probe_port}/readyz"), "ready",
        timeout=timeout)
    ca_bundle = base64.b64encode(cluster.pki.ca.cert.read_bytes()).decode()
    configs = webhook_configurations((release / "webhooks.yaml").read_text(),
                                     f"https://127.0.0.1:{webhook_port}", ca_bundle)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(configs))
    _wait_webhook_serving(cluster, timeout)
    return process


def _wait_webhook_serving(cluster: LocalCluster, timeout: float) -> None:
    """Until a queued RayCluster (dry run) comes back suspended: Kueue's webhook answers."""
    probe = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
             "metadata": {"name": "kueue-probe", "namespace": "default",
                          "labels": {QUEUE_LABEL: "probe"}},
             "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
                 "containers": [{"name": "ray-head", "image": "probe"}]}}}}}
    deadline = time.monotonic() + timeout
    while True:
        out = cluster.kubectl("create", "--dry-run=server", "-o", "yaml", "-f", "-",
                              input=yaml.safe_dump(probe), check=False)
        if out.returncode == 0 and (yaml.safe_load(out.stdout)["spec"] or {}).get("suspend"):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"Kueue's RayCluster webhook not in effect after {timeout:.0f}s: "
                               f"{out.stderr.strip()}")
        time.sleep(0.5)
