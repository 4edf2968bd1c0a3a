"""Fixtures shared by the operator's tests: the GRPORun CRD, installed once per session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from grpo_operator.api.constants import CRD_NAME
from grpo_operator.api.generate import CRD_PATH as _CRD_RELATIVE
from localcluster.processes import free_port

CRD_PATH = Path(__file__).resolve().parents[2] / _CRD_RELATIVE


@pytest.fixture(scope="session")
def grporun_crd(cluster) -> str:
    """Installs the checked-in CRD (server-side, as users are told to) and waits for it."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_PATH))
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
    return CRD_NAME




class OperatorProcess:
    """The operator as its own process (``python -m grpo_operator``), as it runs in its
    Deployment; restartable, to test that restarts lose nothing."""

    def __init__(self, cluster, log_path: Path):
        self.cluster = cluster
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        port = free_port()
        env = {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig)}
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


@pytest.fixture(scope="session")
def operator(cluster, grporun_crd, tmp_path_factory):
    process = OperatorProcess(cluster, tmp_path_factory.mktemp("operator") / "operator.log")
    process.start()
    yield process
    process.stop()
