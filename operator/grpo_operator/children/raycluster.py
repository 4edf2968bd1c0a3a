"""The run's dedicated RayCluster: a head and one worker group on the GPU node pool.

The trainer's entrypoint runs on the head (the Ray Jobs API runs entrypoints there), so the
head mounts the inputs too. Kueue owns ``spec.suspend`` of a queued RayCluster: this builder
never sets it, and the operator never re-applies a whole RayCluster spec.
"""

from __future__ import annotations

from typing import Any

from grpo_operator.api.constants import (
    KUEUE_QUEUE_LABEL,
    LABEL_ROLE,
    LABEL_RUN,
    ROLE_RAY_HEAD,
    ROLE_RAY_WORKER,
)
from grpo_operator.api.ray_job import job_stop_wait_env
from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.children.meta import (
    RunRef,
    child_metadata,
    container_security_context,
    pod_security_context,
)
from grpo_operator.children.volumes import SCRATCH_ENV, ray_pod_mounts, ray_pod_volumes
from grpo_operator.naming import ChildNames

RAY_VERSION = "2.60.0"
# A Ray pod deleted without the operator asking first (Kueue preempting the run, a node drained)
# has the trainer checkpoint before it goes: see grpo_trainer/driver/drain.py. The grace period
# bounds the hook and the shutdown together.
DRAIN_HOOK = {"preStop": {"exec": {"command": ["python", "-m", "grpo_trainer", "drain"]}}}
GPU_WORKER_GROUP = "gpu"
CPU_WORKER_GROUP = "cpu"


def _env(spec: GRPORunSpec) -> list[dict[str, Any]]:
    # Ray's `ray job stop` waits this long after SIGTERM before SIGKILL (3 s by default):
    # the trainer needs the pods' grace period to write its checkpoint.
    stop_wait = job_stop_wait_env(spec.resources.termination_grace_period_seconds)
    return [e.to_wire() for e in spec.resources.env] + [
        SCRATCH_ENV, *({"name": k, "value": v} for k, v in stop_wait.items())
    ]


def _resources(cpu: str, memory: str, extra: dict[str, str] | None = None) -> dict[str, Any]:
    amounts = {"cpu": cpu, "memory": memory, **(extra or {})}
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _pod_template(
    spec: GRPORunSpec,
    run: RunRef,
    container_name: str,
    resources: dict[str, Any],
    *,
    gpu_pool: bool,
    role: str,
) -> dict[str, Any]:
    r = spec.resources
    pod: dict[str, Any] = {
        "serviceAccountName": ChildNames(run.name).service_account,
        "automountServiceAccountToken": False,
        "securityContext": pod_security_context(),
        "terminationGracePeriodSeconds": r.termination_grace_period_seconds,
        "containers": [
            {
                "name": container_name,
                "image": r.image,
                "env": _env(spec),
                "resources": resources,
                "volumeMounts": ray_pod_mounts(spec),
                "lifecycle": DRAIN_HOOK,
                "securityContext": container_security_context(),
            }
        ],
        "volumes": ray_pod_volumes(spec, run.name),
    }
    if r.image_pull_policy:
        pod["containers"][0]["imagePullPolicy"] = str(r.image_pull_policy)
    if r.image_pull_secrets:
        pod["imagePullSecrets"] = [s.to_wire() for s in r.image_pull_secrets]
    if r.priority_class_name:
        pod["priorityClassName"] = r.priority_class_name
    if r.tolerations:
        pod["tolerations"] = [t.to_wire() for t in r.tolerations]
    if r.affinity:
        pod["affinity"] = r.affinity
    if gpu_pool and r.node_selector:
        pod["nodeSelector"] = dict(r.node_selector)
    # The run's label lets the operator's pod watch (selected by it) see the Ray pods.
    return {"metadata": {"labels": {LABEL_ROLE: role, LABEL_RUN: run.name}}, "spec": pod}


def ray_cluster(spec: GRPORunSpec, run: RunRef) -> dict[str, Any]:
    r = spec.resources
    names = ChildNames(run.name)
    worker_extra = {name: str(q) for name, q in r.extra_resources.items()}
    if r.gpus_per_worker:
        worker_extra[r.gpu_resource_name] = str(r.gpus_per_worker)
    labels = {KUEUE_QUEUE_LABEL: spec.run_policy.queue_name} if spec.run_policy.queue_name else {}
    group = GPU_WORKER_GROUP if r.gpus_per_worker else CPU_WORKER_GROUP
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": child_metadata(run, names.ray_cluster, "raycluster", labels),
        "spec": {
            "rayVersion": RAY_VERSION,
            "authOptions": {"mode": "token", "secretName": names.auth_secret},
            "headGroupSpec": {
                # The head schedules no training work: learners and engines go to workers.
                "rayStartParams": {"num-cpus": "0", "num-gpus": "0", "dashboard-host": "0.0.0.0"},
                "template": _pod_template(
                    spec, run, "ray-head", _resources(r.head.cpu, r.head.memory), gpu_pool=False,
                    role=ROLE_RAY_HEAD,
                ),
            },
            "workerGroupSpecs": [
                {
                    "groupName": group,
                    "replicas": r.workers,
                    "minReplicas": r.workers,
                    "maxReplicas": r.workers,
                    "rayStartParams": {},
                    "template": _pod_template(
                        spec,
                        run,
                        "ray-worker",
                        _resources(r.worker.cpu, r.worker.memory, worker_extra),
                        gpu_pool=True,
                        role=ROLE_RAY_WORKER,
                    ),
                }
            ],
        },
    }
