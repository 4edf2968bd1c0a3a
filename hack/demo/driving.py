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


class PodKiller:
    """Once the trainer has checkpointed step ``after_steps`` (seen on the checkpoint volume,
    sooner than in status), delete the first Running pod ``selector`` picks — the first
    attempt's driver pod, or a Ray worker pod — as a node drain would. ``killed_at`` (wall
    clock) and ``checkpoint_step`` say when and after which checkpoint."""

    def __init__(self, api, namespace: str, selector: str, what: str, after_steps: int,
                 checkpoints: Path, out: Callable[[str], None] = print):
        self.core = client.CoreV1Api(api)
        self.namespace, self.selector, self.what = namespace, selector, what
        self.after = after_steps
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
            self.namespace, label_selector=self.selector
        ).items:
            if pod.status.phase == "Running":
                self.core.delete_namespaced_pod(pod.metadata.name, self.namespace)
                self.killed_at, self.checkpoint_step = time.time(), steps
                self.out(f"        --- deleted the {self.what} {pod.metadata.name} after "
                         f"checkpoint step_{steps}: the operator should resume from the last "
                         "checkpoint ---")
                return


def driver_pods(name: str) -> tuple[str, str]:
    """``PodKiller``'s target: the first attempt's driver pod."""
    return f"job-name={name}-a1", "driver pod"


def worker_pods(name: str) -> tuple[str, str]:
    """``PodKiller``'s target: a Ray worker pod of the run's RayCluster."""
    return f"ray.io/cluster={name},ray.io/node-type=worker", "Ray worker pod"


def for_multinode(run_body: dict) -> dict:
    """The example on two 1-CPU Ray worker pods, the engine on one and the learner on the
    other (``split``): each pod its own Ray node, the weights synced across them."""
    spec = run_body["spec"]
    spec["resources"]["workers"] = 2
    spec["resources"]["worker"] = {"cpu": "1", "memory": "3Gi"}
    spec["rollout"]["placement"] = "split"
    return run_body


def apply_and_follow(cluster, run_body: dict, timeout: float, namespace: str = "default",
                     kill_driver_after: int | None = None, out: Callable[[str], None] = print,
                     kill=driver_pods, on_status: Callable[[dict], None] | None = None
                     ) -> tuple[dict, watch.Curve, PodKiller | None]:
    """Apply the run (its inputs already prepared) on a cluster whose operator is running and
    follow it to its end; with ``kill_driver_after``, delete a pod (``kill``: the driver's by
    default) once that many steps are checkpointed. Returns the final status, the curve and
    the killer."""
    name = run_body["metadata"]["name"]
    cluster.kubectl("apply", "--server-side", "-n", namespace, "-f", "-",
                    input=yaml.safe_dump(run_body))
    out(f"applied GRPORun {namespace}/{name}; following its status:")
    api = cluster.api_client()
    killer = None if kill_driver_after is None else PodKiller(
        api, namespace, *kill(name), kill_driver_after, inputs.host_dirs(run_body)["checkpoints"],
        out=out)
    def seen(status: dict) -> None:
        for hook in (killer, on_status):
            if hook is not None:
                hook(status)

    try:
        status, curve = watch.follow(api, namespace, name, timeout, out=out, on_status=seen)
    finally:
        api.close()
    return status, curve, killer
