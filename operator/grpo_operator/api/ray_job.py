"""How the driver reaches its RayCluster, shared by the operator's builders and the driver.

The stop path has three clocks that must nest:

1. the trainer's checkpoint on SIGTERM, which Ray allows ``RAY_JOB_STOP_WAIT_TIME_S`` seconds
   (read by the *head*: Ray's default is 3 s, then SIGKILL) — set from the run's
   ``resources.terminationGracePeriodSeconds``;
2. the driver's own wait after it asked Ray to stop the job: that stop wait plus a slack
   (the driver's ``--stop-timeout``);
3. the driver pod's ``terminationGracePeriodSeconds``: the stop wait plus
   ``DRIVER_GRACE_MARGIN_S``, so the kubelet does not kill the driver before it has passed the
   trainer's code on.
"""

from __future__ import annotations

ADDRESS_ENV = "RAY_ADDRESS"
"""The head's Jobs API, e.g. ``http://<cluster>-head-svc.<ns>.svc.cluster.local:8265``."""
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
"""A file holding the cluster's Ray auth token (Ray's own name; the mounted Secret key)."""
JOB_STOP_WAIT_ENV = "RAY_JOB_STOP_WAIT_TIME_S"
"""Read by the head's job supervisor: seconds between SIGTERM and SIGKILL of a stopped job."""

DASHBOARD_PORT = 8265
"""The head's Jobs API port (the head Service's ``dashboard`` port)."""
DRIVER_METRICS_PORT = 9400
"""The driver container's ``metrics`` port: the driver serves the figures of the newest relayed
report at ``/metrics`` there (its ``--metrics-port`` / ``$GRPO_DRIVER_METRICS_PORT`` override
it; 0 serves nothing)."""

TOKEN_SECRET_KEY = "auth_token"
"""The key of the run's Ray auth-token Secret (KubeRay's authOptions Secret uses it too)."""
DRIVER_TOKEN_DIR = "/var/run/secrets/ray-auth"
"""Where the driver Job mounts that Secret (read-only); RAY_AUTH_TOKEN_PATH names the file."""
DRIVER_TOKEN_PATH = f"{DRIVER_TOKEN_DIR}/{TOKEN_SECRET_KEY}"

REPORT_KEY_SECRET_KEY = "report_key"
"""The key of the run's report-key Secret: the HMAC key that signs the reports (see
``grpo_operator.api.report``)."""
DRIVER_REPORT_KEY_DIR = "/var/run/secrets/grpo-report"
"""Where the driver Job mounts that Secret (read-only); GRPO_REPORT_KEY_PATH names the file."""
DRIVER_REPORT_KEY_PATH = f"{DRIVER_REPORT_KEY_DIR}/{REPORT_KEY_SECRET_KEY}"
REPORT_KEY_PATH_ENV = "GRPO_REPORT_KEY_PATH"
"""A file holding the run's report key, which the driver signs every report it relays with."""

RAY_DEFAULT_JOB_STOP_WAIT_S = 3
"""Ray 2.60's stop wait when RAY_JOB_STOP_WAIT_TIME_S is unset: too short for a checkpoint."""
DRIVER_GRACE_MARGIN_S = 30
"""How much longer than the stop wait the driver pod's grace period is."""


def job_stop_wait_env(stop_wait_s: int) -> dict[str, str]:
    """The env entry for the head and driver containers of a run whose trainer gets
    ``stop_wait_s`` seconds to checkpoint after SIGTERM."""
    return {JOB_STOP_WAIT_ENV: str(max(int(stop_wait_s), RAY_DEFAULT_JOB_STOP_WAIT_S))}


def driver_termination_grace_s(stop_wait_s: int) -> int:
    """``terminationGracePeriodSeconds`` for the driver pod."""
    return max(int(stop_wait_s), RAY_DEFAULT_JOB_STOP_WAIT_S) + DRIVER_GRACE_MARGIN_S


def submission_id(run_name: str, attempt: int) -> str:
    """The attempt's Ray submission id, ``<run>-a<attempt>`` (like the driver Job's name); a
    second submission with the same id is refused, which makes submitting idempotent."""
    return f"{run_name}-a{attempt}"
