"""Fixtures shared by the operator's tests: the GRPORun CRD, the Helm chart installed once per
session, and the operator process running with exactly the chart's ServiceAccount identity.

tests/charts/ imports ``grporun_crd`` and ``chart_identity`` too. pytest makes one fixture
instance per conftest that registers it, so the release is kept in the session's stash and
installed once, whichever directory asks first. The session's operator registers itself there
while it runs, so that a test that needs the cluster to itself can pause it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client, config

from grpo_operator.api.constants import CRD_NAME
from grpo_operator.api.generate import CHART_DIR
from grpo_operator.api.generate import CRD_PATH as _CRD_RELATIVE
from localcluster.operator_process import OperatorProcess
from localcluster.processes import free_port

REPO = Path(__file__).resolve().parents[2]
CRD_PATH = REPO / _CRD_RELATIVE
CHART = REPO / CHART_DIR

# The session's release: the operator as `helm install` sets it up, cluster-wide.
RELEASE = "grpo-operator"
RELEASE_NAMESPACE = "grpo-system"

_SESSION = pytest.StashKey[dict[str, Any]]()
T = TypeVar("T")


def session_once(request: pytest.FixtureRequest, key: str, make: Callable[[], T]) -> T:
    """``make()`` once per test session, whichever conftest's fixture calls first."""
    made = request.config.stash.setdefault(_SESSION, {})
    if key not in made:
        made[key] = make()
    return made[key]


@pytest.fixture(scope="session")
def grporun_crd(cluster) -> str:
    """Installs the checked-in CRD (server-side, as users are told to) and waits for it."""
    cluster.install_crd(CRD_PATH)
    return CRD_NAME


# -- the chart -------------------------------------------------------------------------------


def helm(cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """The pinned helm, as the cluster's admin; fails the test with helm's stderr."""
    proc = subprocess.run(
        [cluster.tools.bin("helm"), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True, text=True, timeout=180,
    )
    if proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stderr}")
    return proc


@dataclass(frozen=True)
class ChartIdentity:
    """A release of the chart, and a kubeconfig holding a token of its ServiceAccount."""

    release: str
    namespace: str
    service_account: str
    kubeconfig: Path
    watch_namespaces: tuple[str, ...] = ()
    operator_env: dict[str, str] = field(default_factory=dict)
    """The operator's environment as the release's Deployment sets it (the downward API's
    namespace resolved)."""

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"

    def api_client(self) -> client.ApiClient:
        return config.new_client_from_config(config_file=str(self.kubeconfig))


def install_chart(cluster, admin: client.ApiClient, release: str, namespace: str,
                  directory: Path, *helm_args: str) -> ChartIdentity:
    """``helm install`` into a namespace that enforces the ``restricted`` Pod Security
    Standard (so the operator pod is admitted only with the chart's hardened security
    contexts), waiting for the Deployment (under KWOK its pod is Running without running);
    then a token of the release's ServiceAccount from the TokenRequest API."""
    core = client.CoreV1Api(admin)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=namespace, labels={"pod-security.kubernetes.io/enforce": "restricted"})))
    helm(cluster, "install", release, str(CHART), "--namespace", namespace,
         "--wait", "--timeout", "90s", *helm_args)
    accounts = core.list_namespaced_service_account(
        namespace, label_selector=f"app.kubernetes.io/instance={release}").items
    assert len(accounts) == 1, [a.metadata.name for a in accounts]
    account = accounts[0].metadata.name
    token = core.create_namespaced_service_account_token(
        account, namespace,
        client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=6 * 3600)),
    ).status.token
    kubeconfig = cluster.write_kubeconfig(directory / f"{release}.kubeconfig",
                                          user=f"system:serviceaccount:{namespace}:{account}",
                                          token=token)
    deployment = client.AppsV1Api(admin).list_namespaced_deployment(
        namespace, label_selector=f"app.kubernetes.io/instance={release}").items[0]
    env = {}
    for var in deployment.spec.template.spec.containers[0].env or []:
        field_ref = var.value_from.field_ref if var.value_from else None
        if field_ref is not None and field_ref.field_path == "metadata.namespace":
            env[var.name] = namespace
        elif var.value is not None:
            env[var.name] = var.value
    watched = tuple(n for n in env.get("WATCH_NAMESPACES", "").split(",") if n)
    return ChartIdentity(release, namespace, account, kubeconfig, watched, env)


@pytest.fixture(scope="session")
def chart_identity(cluster, k8s_api, grporun_crd, tmp_path_factory, request) -> ChartIdentity:
    """The chart installed once per session, cluster-wide (the CRD is already there: Helm
    skips an existing CRD in crds/), and its ServiceAccount's identity."""
    return session_once(request, "chart_identity", lambda: install_chart(
        cluster, k8s_api, RELEASE, RELEASE_NAMESPACE, tmp_path_factory.mktemp("chart")))


# -- the operator ----------------------------------------------------------------------------


# Bounds short enough for tests: a lost cluster is judged in half a minute (KubeRay replacing
# a worker pod takes longer than 15 s on two cores busy with two test workers), GPU time is
# metered often.
OPERATOR_SETTINGS = {
    "GRPO_CLUSTER_UNHEALTHY_SECONDS": "30",
    "GRPO_METER_INTERVAL_SECONDS": "3",
    "GRPO_METRICS_PORT": str(free_port()),
}
METRICS_URL = f"http://127.0.0.1:{OPERATOR_SETTINGS['GRPO_METRICS_PORT']}/metrics"


def host_path_settings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Runs mount their inputs from the tests' temporary directories: the operator allows
    hostPath volumes under this session's base directory and nowhere else, so a path outside
    it is refused as a production install refuses one."""
    return {"GRPO_HOSTPATH_PREFIXES": str(tmp_path_factory.getbasetemp())}


def running_session_operator(request: pytest.FixtureRequest) -> OperatorProcess | None:
    """The session's operator if it has been started (and not yet stopped for good)."""
    return request.config.stash.setdefault(_SESSION, {}).get("operator")


@pytest.fixture(scope="session")
def operator(cluster, chart_identity, tmp_path_factory, request) -> Iterator[OperatorProcess]:
    """The operator for the rest of the session, running as the chart's ServiceAccount
    (cluster-wide release), so every test that drives it exercises the chart's RBAC. At the
    end of the session its log must show no request refused by RBAC."""
    process = OperatorProcess(cluster, tmp_path_factory.mktemp("operator") / "operator.log",
                              kubeconfig=chart_identity.kubeconfig,
                              env={**chart_identity.operator_env, **OPERATOR_SETTINGS,
                                   **host_path_settings(tmp_path_factory)})
    process.start()
    registry = request.config.stash.setdefault(_SESSION, {})
    registry["operator"] = process
    yield process
    del registry["operator"]
    process.stop()
    refused = process.refusals()
    assert not refused, (f"the operator, as {chart_identity.user}, was refused:\n"
                         + "\n".join(refused[:20]))
