"""One function per control-plane component: start it under the supervisor with the flags it
needs, and return once its own health endpoint answers (or fail with its log's tail)."""

from __future__ import annotations

import ssl
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import kubeconfig, pki
from .binaries import Toolset
from .processes import Supervisor, free_port

SERVICE_CIDR = "10.0.0.0/24"
POD_CIDR = "10.244.0.0/16"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
# The harness plays the kubelet of driver pods (driver_runner) and of the operator's Ray pods
# (ray_pods, labelled ray-head/ray-worker); KWOK leaves the pods it plays alone.
DRIVER_SELECTOR = "grpo.dev/role=driver"
PLAYED_SELECTOR = "grpo.dev/role in (driver,ray-head,ray-worker)"
# Jobs, garbage collection, namespaces, service accounts, PV binding...: the defaults, minus
# node-lifecycle, which would mark KWOK's heartbeat-less nodes NotReady and evict their pods.
CONTROLLERS = "*,-node-lifecycle-controller,-cloud-node-lifecycle-controller"


@dataclass(frozen=True)
class Context:
    tools: Toolset
    supervisor: Supervisor
    pki: pki.Pki
    root: Path


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    with urllib.request.urlopen(url, timeout=2, context=context) as response:
        return response.status == 200


def _self_signed_ok(url: str) -> bool:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # components serve their health on self-signed certs
    return http_ok(url, context)


def component_kubeconfig(ctx: Context, server: str, component: str) -> Path:
    return kubeconfig.write(
        ctx.root / f"{component}.kubeconfig",
        server,
        ctx.pki.ca.cert,
        user=pki.COMPONENT_USERS[component][0],
        client=ctx.pki.client(component),
    )


def start_etcd(ctx: Context) -> str:
    port, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    proc = ctx.supervisor.start(
        "etcd",
        [
            ctx.tools.bin("etcd"),
            "--name=local",
            f"--data-dir={ctx.root / 'etcd'}",
            f"--listen-client-urls={url}",
            f"--advertise-client-urls={url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=local=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ],
    )
    ctx.supervisor.wait_until(proc, lambda: http_ok(f"{url}/health"), "healthy", timeout=30)
    return url


def start_apiserver(
    ctx: Context, etcd_url: str, extra_flags: Sequence[str] = ()
) -> tuple[str, Path]:
    """Returns the server URL and the admin kubeconfig."""
    port = free_port()
    server = f"https://127.0.0.1:{port}"
    p = ctx.pki
    proc = ctx.supervisor.start(
        "kube-apiserver",
        [
            ctx.tools.bin("kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--cert-dir={ctx.root / 'apiserver-certs'}",
            f"--tls-cert-file={p.apiserver.cert}",
            f"--tls-private-key-file={p.apiserver.key}",
            f"--client-ca-file={p.ca.cert}",
            "--authorization-mode=Node,RBAC",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={p.sa_pub}",
            f"--service-account-signing-key-file={p.sa_key}",
            "--allow-privileged=true",
            # New nodes get a not-ready taint that only node-lifecycle (off, see CONTROLLERS)
            # would lift; KWOK nodes are Ready at once, so they are created without it.
            "--disable-admission-plugins=TaintNodesByCondition",
            "--profiling=false",
            "--v=1",
            *extra_flags,
        ],
    )
    admin = kubeconfig.write(
        ctx.root / "kubeconfig", server, p.ca.cert, user="admin", client=p.admin
    )
    tls = ssl.create_default_context(cafile=str(p.ca.cert))
    tls.load_cert_chain(str(p.admin.cert), str(p.admin.key))
    ctx.supervisor.wait_until(
        proc, lambda: http_ok(f"{server}/readyz", tls), "ready (/readyz)", timeout=90
    )
    return server, admin


def _secure_component(ctx: Context, name: str, binary: str, config: Path, flags: list[str]):
    port = free_port()
    proc = ctx.supervisor.start(
        name,
        [
            ctx.tools.bin(binary),
            f"--kubeconfig={config}",
            f"--authentication-kubeconfig={config}",
            f"--authorization-kubeconfig={config}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={ctx.root / (name + '-certs')}",
            "--leader-elect=false",
            "--v=1",
            *flags,
        ],
    )
    ctx.supervisor.wait_until(
        proc, lambda: _self_signed_ok(f"https://127.0.0.1:{port}/healthz"), "healthy", timeout=60
    )


def start_controller_manager(ctx: Context, server: str) -> None:
    config = component_kubeconfig(ctx, server, "controller-manager")
    _secure_component(
        ctx,
        "kube-controller-manager",
        "kube-controller-manager",
        config,
        [
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={ctx.pki.sa_key}",
            f"--root-ca-file={ctx.pki.ca.cert}",
            f"--controllers={CONTROLLERS}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
        ],
    )


def start_scheduler(ctx: Context, server: str) -> None:
    config = component_kubeconfig(ctx, server, "scheduler")
    _secure_component(ctx, "kube-scheduler", "kube-scheduler", config, [])


def start_kwok(ctx: Context, server: str, disregarded: str = DRIVER_SELECTOR) -> None:
    """KWOK with its stock fast stages (nodes Ready; pods Running and Ready; Job pods
    completed; deleted pods removed), skipping the pods ``disregarded`` selects entirely."""
    stages = ctx.root / "kwok-stages.yaml"
    stages.write_text(
        "\n---\n".join(p.read_text() for p in sorted(ctx.tools.kwok_stages.glob("*.yaml")))
    )
    port = free_port()
    proc = ctx.supervisor.start(
        "kwok",
        [
            ctx.tools.bin("kwok"),
            f"--kubeconfig={component_kubeconfig(ctx, server, 'kwok')}",
            f"--config={stages}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--disregard-status-with-label-selector={disregarded}",
            f"--cidr={POD_CIDR}",
            "--node-ip=127.0.0.1",
            f"--server-address=127.0.0.1:{port}",
        ],
    )
    ctx.supervisor.wait_until(
        proc, lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), "healthy", timeout=60
    )


def start_kuberay(ctx: Context, server: str) -> None:
    """The KubeRay operator out of cluster (its CRDs must be installed first)."""
    probe = free_port()
    proc = ctx.supervisor.start(
        "kuberay-operator",
        [
            ctx.tools.bin("kuberay-operator"),
            "--enable-leader-election=false",
            f"--metrics-addr=127.0.0.1:{free_port()}",
            f"--health-probe-bind-address=127.0.0.1:{probe}",
            "--log-stdout-encoder=console",
        ],
        env={"KUBECONFIG": str(component_kubeconfig(ctx, server, "kuberay"))},
    )
    ctx.supervisor.wait_until(
        proc, lambda: http_ok(f"http://127.0.0.1:{probe}/readyz"), "ready", timeout=60
    )
