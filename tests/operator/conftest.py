"""Fixtures shared by the operator's tests: the GRPORun CRD, the Helm chart installed once per
session, and the operator process running with exactly the chart's ServiceAccount identity.

tests/charts/ imports ``grporun_crd`` and ``chart_identity`` too. pytest makes one fixture
instance per conftest that registers it, so the release is kept in the session's stash and
installed once, whichever directory asks first. The session's operator registers itself there
while it runs, so that a test that needs the cluster to itself can pause it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client, config

from grpo_operator.api.constants import CRD_NAME
from grpo_operator.api.generate import CHART_DIR
from grpo_operator.api.generate import CRD_PATH as _CRD_RELATIVE
from localcluster.processes import free_port

REPO = Path(__file__).resolve().parents[2]
CRD_PATH = REPO / _CRD_RELATIVE
CHART = REPO / CHART_DIR

# The session's release: the operator as `helm install` sets it up, cluster-wide.
RELEASE = "grpo-operator"
RELEASE_NAMESPACE = "grpo-system"

# What an operator log must never say: a request RBAC refused (the API server's 403 reads
# '<resource> "<name>" is forbidden: User "<user>" cannot <verb> resource ...', quotes escaped
# when logged as a JSON body) or kopf's warning when it lacks a grant. Other 403s are not
# about the grant: e.g. "unable to create new content in namespace x because it is being
# terminated" when a test's namespace goes away under a run.
RBAC_REFUSAL = re.compile(r"forbidden: User .{1,200}? cannot |not enough permissions",
                          re.IGNORECASE)

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
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_PATH))
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
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
    env = {e.name: e.value for e in deployment.spec.template.spec.containers[0].env or []}
    watched = tuple(n for n in env.get("WATCH_NAMESPACES", "").split(",") if n)
    return ChartIdentity(release, namespace, account, kubeconfig, watched)


@pytest.fixture(scope="session")
def chart_identity(cluster, k8s_api, grporun_crd, tmp_path_factory, request) -> ChartIdentity:
    """The chart installed once per session, cluster-wide (the CRD is already there: Helm
    skips an existing CRD in crds/), and its ServiceAccount's identity."""
    return session_once(request, "chart_identity", lambda: install_chart(
        cluster, k8s_api, RELEASE, RELEASE_NAMESPACE, tmp_path_factory.mktemp("chart")))


# -- the operator ----------------------------------------------------------------------------


class OperatorProcess:
    """The operator as its own process (``python -m grpo_operator``), as it runs in its
    Deployment, with the identity in ``kubeconfig``; restartable, to test that restarts lose
    nothing."""

    def __init__(self, cluster, log_path: Path, kubeconfig: Path | None = None,
                 env: dict[str, str] | None = None):
        self.cluster = cluster
        self.log_path = log_path
        self.kubeconfig = kubeconfig or cluster.kubeconfig
        self.env = env or {}
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        port = free_port()
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        env.pop("WATCH_NAMESPACES", None)  # cluster-wide unless self.env says otherwise
        env.update(self.env)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "grpo_operator",
                 "--liveness", f"http://127.0.0.1:{port}/healthz"],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator exited: {self.log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"operator not live after 60s: {self.log_path.read_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL: no chance to clean up, as when a node dies."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Stopped for the duration (e.g. while another operator is tested alone), then
        started again."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def refusals(self) -> list[str]:
        """Log lines that show a request RBAC refused (a missing log is an error, not a clean
        one)."""
        return [line for line in self.log_path.read_text(errors="replace").splitlines()
                if RBAC_REFUSAL.search(line)]


def running_session_operator(request: pytest.FixtureRequest) -> OperatorProcess | None:
    """The session's operator if it has been started (and not yet stopped for good)."""
    return request.config.stash.setdefault(_SESSION, {}).get("operator")


@pytest.fixture(scope="session")
def operator(cluster, chart_identity, tmp_path_factory, request) -> Iterator[OperatorProcess]:
    """The operator for the rest of the session, running as the chart's ServiceAccount
    (cluster-wide release), so every test that drives it exercises the chart's RBAC. At the
    end of the session its log must show no request refused by RBAC."""
    process = OperatorProcess(cluster, tmp_path_factory.mktemp("operator") / "operator.log",
                              kubeconfig=chart_identity.kubeconfig)
    process.start()
    registry = request.config.stash.setdefault(_SESSION, {})
    registry["operator"] = process
    yield process
    del registry["operator"]
    process.stop()
    refused = process.refusals()
    assert not refused, (f"the operator, as {chart_identity.user}, was refused:\n"
                         + "\n".join(refused[:20]))
