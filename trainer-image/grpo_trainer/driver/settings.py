"""Names and defaults the driver shares with the operator's builders (no Ray import here).

The stop path has three clocks that must nest:

1. the trainer's checkpoint on SIGTERM, which Ray allows ``RAY_JOB_STOP_WAIT_TIME_S`` seconds
   (read by the *head*: Ray's default is 3 s, then SIGKILL);
2. the driver's own wait after it asked Ray to stop the job: that stop wait plus
   ``STOP_SLACK_S`` (``--stop-timeout``);
3. the driver pod's ``terminationGracePeriodSeconds``: the stop wait plus
   ``DRIVER_GRACE_MARGIN_S``, so the kubelet does not kill the driver before it has passed the
   trainer's code on.

The RayCluster builder sets ``RAY_JOB_STOP_WAIT_TIME_S`` on the head container (and the driver
Job builder sets the same value on the driver container, from which the driver derives its
default stop timeout); see `job_stop_wait_env` and `driver_termination_grace_s`.
"""

from __future__ import annotations

from grpo_operator.api.constants import LABEL_ATTEMPT, LABEL_RUN, LABEL_RUN_UID
from grpo_operator.api.run_config import RUN_CONFIG_KEY

# --- Environment variables ------------------------------------------------------------------------

ADDRESS_ENV = "RAY_ADDRESS"
"""The head's Jobs API, e.g. ``http://<cluster>-head-svc.<ns>.svc:8265`` (Ray's own name)."""
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
"""A file holding the cluster's Ray auth token (Ray's own name; the mounted Secret key)."""
JOB_STOP_WAIT_ENV = "RAY_JOB_STOP_WAIT_TIME_S"
"""Read by the head's job supervisor: seconds between SIGTERM and SIGKILL of a stopped job."""
STOP_TIMEOUT_ENV = "GRPO_DRIVER_STOP_TIMEOUT_S"
"""Overrides the driver's default stop timeout."""

# --- The token ------------------------------------------------------------------------------------

TOKEN_SECRET_KEY = "auth_token"
"""The key of the run's Ray auth-token Secret (KubeRay's authOptions Secret uses it too)."""
DRIVER_TOKEN_DIR = "/var/run/secrets/ray-auth"
"""Where the driver Job mounts that Secret (read-only); RAY_AUTH_TOKEN_PATH names the file."""
DRIVER_TOKEN_PATH = f"{DRIVER_TOKEN_DIR}/{TOKEN_SECRET_KEY}"

# --- Stopping -------------------------------------------------------------------------------------

RAY_DEFAULT_JOB_STOP_WAIT_S = 3
"""Ray 2.60's stop wait when RAY_JOB_STOP_WAIT_TIME_S is unset: too short for a checkpoint."""
RECOMMENDED_JOB_STOP_WAIT_S = 120
"""The head's RAY_JOB_STOP_WAIT_TIME_S when the run says nothing else: the default of
``spec.resources.terminationGracePeriodSeconds`` (the time the trainer has to checkpoint)."""
STOP_SLACK_S = 20
"""How much longer than the stop wait the driver waits for the stopped job to end: Ray marks the
job STOPPED only after the entrypoint exited (or was killed), and the driver polls."""
DRIVER_GRACE_MARGIN_S = 30
"""How much longer than the stop wait the driver pod's grace period must be (> STOP_SLACK_S)."""


def job_stop_wait_env(stop_wait_s: int = RECOMMENDED_JOB_STOP_WAIT_S) -> dict[str, str]:
    """The env entry for the head container (and the driver container) of a run whose trainer
    gets ``stop_wait_s`` seconds to checkpoint after SIGTERM."""
    return {JOB_STOP_WAIT_ENV: str(max(int(stop_wait_s), RAY_DEFAULT_JOB_STOP_WAIT_S))}


def driver_termination_grace_s(stop_wait_s: int = RECOMMENDED_JOB_STOP_WAIT_S) -> int:
    """``terminationGracePeriodSeconds`` for the driver pod."""
    return max(int(stop_wait_s), RAY_DEFAULT_JOB_STOP_WAIT_S) + DRIVER_GRACE_MARGIN_S


def default_stop_timeout_s(environ: dict[str, str]) -> float:
    """The driver's stop timeout: $GRPO_DRIVER_STOP_TIMEOUT_S, else the stop wait in its own
    environment (or Ray's default) plus STOP_SLACK_S."""
    if environ.get(STOP_TIMEOUT_ENV):
        return float(environ[STOP_TIMEOUT_ENV])
    wait = float(environ.get(JOB_STOP_WAIT_ENV) or RAY_DEFAULT_JOB_STOP_WAIT_S)
    return wait + STOP_SLACK_S


# --- The submission -------------------------------------------------------------------------------

SUBMITTED_CONFIG_NAME = RUN_CONFIG_KEY
"""The run config travels with the submission: the driver uploads the file it read as the job's
``working_dir`` under this name, so the trainer reads the current attempt's config even when
the head's own ConfigMap mount still lags behind (kubelet sync, up to about a minute)."""
DEFAULT_ENTRYPOINT = f"python -m grpo_trainer run --config {SUBMITTED_CONFIG_NAME}"
"""The trainer command the driver submits (run in the job's working_dir)."""

METADATA_RUN = LABEL_RUN
METADATA_RUN_UID = LABEL_RUN_UID
METADATA_ATTEMPT = LABEL_ATTEMPT
"""Job metadata keys: the driver refuses to attach to a job of another run (same name,
other UID) and stops running jobs of the run's earlier attempts before submitting."""


def submission_id(run_name: str, attempt: int) -> str:
    """The attempt's Ray submission id, ``<run>-a<attempt>`` (like the driver Job's name)."""
    return f"{run_name}-a{attempt}"


# --- Timeouts (seconds) ---------------------------------------------------------------------------

DEFAULT_CONNECT_TIMEOUT_S = 60.0
"""Reaching the head's Jobs API at start (the head may still be starting its dashboard)."""
DEFAULT_REQUEST_TIMEOUT_S = 10.0
"""One HTTP request to the head (connect + read)."""
DEFAULT_SUBMIT_TIMEOUT_S = 60.0
"""Submitting (or finding) the job, retries included."""
DEFAULT_LOST_TIMEOUT_S = 120.0
"""How long the head may stay unreachable while the driver follows the job."""
DEFAULT_POLL_INTERVAL_S = 2.0
"""Between two status polls."""
LOG_DRAIN_TIMEOUT_S = 10.0
"""After the job ended, how long the log stream gets to deliver the rest."""
