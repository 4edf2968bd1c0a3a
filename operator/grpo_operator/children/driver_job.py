"""The driver Job of one attempt: a small pod that submits the trainer to the RayCluster's
head through the Ray Jobs API, follows it, relays its reports, and exits with its code.

backoffLimit 0: the operator owns retries (a new attempt is a new Job). The podFailurePolicy
marks the non-retryable exit codes and a disrupted pod (evicted, preempted, its node tainted),
so the Job's failure says why without reading the pod.
"""

from __future__ import annotations

from typing import Any

from grpo_operator.api.constants import LABEL_ATTEMPT, LABEL_ROLE, ROLE_DRIVER
from grpo_operator.api.exit_codes import NON_RETRYABLE_EXIT_CODES
from grpo_operator.api.ray_job import (
    ADDRESS_ENV,
    DASHBOARD_PORT,
    DRIVER_METRICS_PORT,
    DRIVER_REPORT_KEY_PATH,
    DRIVER_TOKEN_PATH,
    REPORT_KEY_PATH_ENV,
    TOKEN_PATH_ENV,
    driver_termination_grace_s,
    job_stop_wait_env,
)
from grpo_operator.api.run_config import RUN_CONFIG_PATH
from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.children.meta import (
    RunRef,
    child_metadata,
    container_security_context,
    pod_security_context,
    run_labels,
)
from grpo_operator.children.volumes import (
    RAY_AUTH_MOUNT,
    REPORT_KEY_MOUNT,
    RUN_CONFIG_MOUNT,
    SCRATCH_ENV,
    SCRATCH_MOUNT,
    SCRATCH_VOLUME,
    ray_auth_volume,
    report_key_volume,
    run_config_volume,
)
from grpo_operator.naming import ChildNames

DRIVER_CONTAINER = "driver"
METRICS_PORT_NAME = "metrics"
# The label by which a test cluster's harness recognises the pods it must run for real.


def head_address(run: RunRef) -> str:
    service = ChildNames(run.name).head_service
    return f"http://{service}.{run.namespace}.svc.cluster.local:{DASHBOARD_PORT}"


def driver_job(spec: GRPORunSpec, run: RunRef, attempt: int) -> dict[str, Any]:
    r = spec.resources
    names = ChildNames(run.name)
    attempt_label = {LABEL_ATTEMPT: str(attempt)}
    pod_labels = {**run_labels(run, "driver"), **attempt_label, LABEL_ROLE: ROLE_DRIVER}
    amounts = {"cpu": r.driver.cpu, "memory": r.driver.memory}
    stop_wait = job_stop_wait_env(r.termination_grace_period_seconds)
    container: dict[str, Any] = {
        "name": DRIVER_CONTAINER,
        "image": r.image,
        "command": ["python", "-m", "grpo_trainer", "submit", "--config", RUN_CONFIG_PATH],
        "env": [
            {"name": ADDRESS_ENV, "value": head_address(run)},
            {"name": TOKEN_PATH_ENV, "value": DRIVER_TOKEN_PATH},
            {"name": REPORT_KEY_PATH_ENV, "value": DRIVER_REPORT_KEY_PATH},
            SCRATCH_ENV,
            *({"name": k, "value": v} for k, v in stop_wait.items()),
        ],
        # The driver serves the newest report's figures there (a PodMonitor selects it by name).
        "ports": [
            {"name": METRICS_PORT_NAME, "containerPort": DRIVER_METRICS_PORT, "protocol": "TCP"}
        ],
        "resources": {"requests": dict(amounts), "limits": dict(amounts)},
        # No model or dataset: the driver submits and follows; the trainer reads them on the
        # Ray pods.
        "volumeMounts": [RUN_CONFIG_MOUNT, RAY_AUTH_MOUNT, REPORT_KEY_MOUNT, SCRATCH_MOUNT],
        "securityContext": container_security_context(),
    }
    if r.image_pull_policy:
        container["imagePullPolicy"] = str(r.image_pull_policy)
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": names.service_account,
        # The driver relays the trainer's reports: it alone holds the run's API identity.
        "automountServiceAccountToken": True,
        "securityContext": pod_security_context(),
        "terminationGracePeriodSeconds": driver_termination_grace_s(
            r.termination_grace_period_seconds
        ),
        "containers": [container],
        "volumes": [run_config_volume(run.name), ray_auth_volume(run.name),
                    report_key_volume(run.name), SCRATCH_VOLUME],
    }
    if r.image_pull_secrets:
        pod["imagePullSecrets"] = [s.to_wire() for s in r.image_pull_secrets]
    if r.priority_class_name:
        pod["priorityClassName"] = r.priority_class_name
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": child_metadata(run, names.driver_job(attempt), "driver", attempt_label),
        "spec": {
            "backoffLimit": 0,
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": DRIVER_CONTAINER,
                            "operator": "In",
                            "values": list(NON_RETRYABLE_EXIT_CODES),
                        },
                    },
                    # A pod the cluster took away: the Job's Failed condition names the rule,
                    # so the operator knows it even once the pod is gone (it costs no restart).
                    {
                        "action": "FailJob",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    },
                ]
            },
            "template": {"metadata": {"labels": pod_labels}, "spec": pod},
        },
    }
