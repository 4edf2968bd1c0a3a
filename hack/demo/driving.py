"""Applying a run and following it to its end, optionally deleting its driver pod after a
checkpoint (``DEMO=recovery``; ``make bench`` times the recovery that follows)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import yaml
from kubernetes import client

from demo import inputs, watch

# DEMO=recovery: steps take about a second here; a longer run leaves time to interrupt it
# after its second checkpoint.
RECOVERY_STEPS = 16
KILL_AFTER_STEPS = 2


def for_recovery(run_body: dict) -> dict:
    """The run made long enough to be interrupted (``kill_driver_after=KILL_AFTER_STEPS``)."""
    run_body["spec"]["algorithm"]["maxSteps"] = RECOVERY_STEPS
    return run_body


class DriverKiller:
    """Once the trainer has checkpointed step ``after_steps`` (seen on the checkpoint volume,
    sooner than in status), delete the first attempt's driver pod, as a node drain would.
    ``killed_at`` (wall clock) and ``checkpoint_step`` say when and after which checkpoint."""

    def __init__(self, api, namespace: str, name: str, after_steps: int, checkpoints: Path,
                 out: Callable[[str], None] = print):
        self.core = client.CoreV1Api(api)
        self.namespace, self.job, self.after = namespace, f"{name}-a1", after_steps
        self.checkpoints = checkpoints
        self.out = out
        self.killed_at: float | None = None
        self.checkpoint_step = 0

    def _checkpointed(self) -> int:
        from grpo_operator.api.checkpoint_layout import parse_step_dir_name

        steps = [parse_step_dir_name(p.name) for p in self.checkpoints.glob("*/step_*")]
        return max((s for s in steps if s is not None), default=0)

    def __call__(self, status: dict) -> None:
        if self.killed_at is not None:
            return
        steps = self._checkpointed()
        if steps < self.after:
            return
        for pod in self.core.list_namespaced_pod(
            self.namespace, label_selector=f"job-name={self.job}"
        ).items:
            if pod.status.phase == "Running":
                self.core.delete_namespaced_pod(pod.metadata.name, self.namespace)
                self.killed_at, self.checkpoint_step = time.time(), steps
                self.out(f"        --- deleted the driver pod {pod.metadata.name} after "
                         f"checkpoint step_{steps}: the operator should resume from the last "
                         "checkpoint ---")


def apply_and_follow(cluster, run_body: dict, timeout: float, namespace: str = "default",
                     kill_driver_after: int | None = None, out: Callable[[str], None] = print
                     ) -> tuple[dict, watch.Curve, DriverKiller | None]:
    """Apply the run (its inputs already prepared) on a cluster whose operator is running and
    follow it to its end; with ``kill_driver_after``, delete the driver pod once that many
    steps are checkpointed. Returns the final status, the curve and the killer."""
    name = run_body["metadata"]["name"]
    cluster.kubectl("apply", "--server-side", "-n", namespace, "-f", "-",
                    input=yaml.safe_dump(run_body))
    out(f"applied GRPORun {namespace}/{name}; following its status:")
    api = cluster.api_client()
    killer = None if kill_driver_after is None else DriverKiller(
        api, namespace, name, kill_driver_after, inputs.host_dirs(run_body)["checkpoints"],
        out=out)
    try:
        status, curve = watch.follow(api, namespace, name, timeout, out=out, on_status=killer)
    finally:
        api.close()
    return status, curve, killer
