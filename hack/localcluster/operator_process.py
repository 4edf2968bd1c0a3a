"""The operator as its own process (``python -m grpo_operator``), as it runs in its Deployment:
one runner for the tests, ``make demo`` and ``make bench``."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

from .processes import free_port, tree_rss

# What an operator log must never say: a request RBAC refused (the API server's 403 reads
# '<resource> "<name>" is forbidden: User "<user>" cannot <verb> resource ...', quotes escaped
# when logged as a JSON body) or kopf's warning when it lacks a grant. Other 403s are not
# about the grant: e.g. "unable to create new content in namespace x because it is being
# terminated" when a test's namespace goes away under a run.
RBAC_REFUSAL = re.compile(r"forbidden: User .{1,200}? cannot |not enough permissions",
                          re.IGNORECASE)


class OperatorProcess:
    """The operator with the identity in ``kubeconfig`` (the cluster's admin by default) and
    ``env`` on top of this process's environment (operator settings, ``WATCH_NAMESPACES``;
    without it the operator is cluster-wide). Its own namespace (``GRPO_NAMESPACE``, which its
    Deployment takes from the downward API) is ``default`` unless ``env`` names one; so is
    its leader-election identity (``GRPO_IDENTITY``, the pod's name there): one per instance,
    kept across restarts, as a restarted container keeps its pod's name.
    Restartable, to test that restarts lose nothing; a context manager that starts and stops
    it."""

    def __init__(self, cluster, log_path: Path, kubeconfig: Path | None = None,
                 env: dict[str, str] | None = None):
        self.log_path = log_path
        self.kubeconfig = kubeconfig or cluster.kubeconfig
        self.env = env or {}
        self.identity = f"{log_path.stem}-{uuid.uuid4().hex[:6]}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> None:
        """Start it and return once its liveness endpoint answers."""
        port = free_port()
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "GRPO_NAMESPACE": "default",
               "GRPO_IDENTITY": self.identity}
        env.pop("WATCH_NAMESPACES", None)
        env.update(self.env)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "grpo_operator",
                 "--liveness", f"http://127.0.0.1:{port}/healthz"],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator exited: {self._tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"operator not live after {timeout:.0f}s: {self._tail()}")

    def _tail(self) -> str:
        return f"log {self.log_path}:\n{self.log_path.read_text(errors='replace')[-3000:]}"

    def kill(self) -> None:
        """SIGKILL: no chance to clean up, as when a node dies."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM to its process group, SIGKILL if it has not exited within 15 s."""
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

    def rss(self) -> int:
        """Resident memory of the operator's process tree, in bytes (0 when not running)."""
        return tree_rss(self.proc.pid) if self.proc and self.proc.poll() is None else 0

    def __enter__(self) -> OperatorProcess:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
