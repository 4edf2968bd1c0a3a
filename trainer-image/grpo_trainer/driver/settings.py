"""The driver's names, defaults and timeouts (no Ray import here). What it shares with the
operator's builders — env names, the token mount, the stop-wait clocks, the submission id — is
the contract's, in ``grpo_operator.api.ray_job``.
"""

from __future__ import annotations

from grpo_operator.api.constants import LABEL_ATTEMPT, LABEL_RUN, LABEL_RUN_UID
from grpo_operator.api.ray_job import (  # noqa: F401 - re-exported for the driver's modules
    ADDRESS_ENV,
    DRIVER_GRACE_MARGIN_S,
    DRIVER_METRICS_PORT,
    DRIVER_TOKEN_DIR,
    DRIVER_TOKEN_PATH,
    JOB_STOP_WAIT_ENV,
    RAY_DEFAULT_JOB_STOP_WAIT_S,
    REPORT_KEY_PATH_ENV,
    TOKEN_PATH_ENV,
    TOKEN_SECRET_KEY,
    driver_termination_grace_s,
    job_stop_wait_env,
    submission_id,
)
from grpo_operator.api.run_config import RUN_CONFIG_KEY

# --- Environment variables ------------------------------------------------------------------------

STOP_TIMEOUT_ENV = "GRPO_DRIVER_STOP_TIMEOUT_S"
"""Overrides the driver's default stop timeout."""
METRICS_PORT_ENV = "GRPO_DRIVER_METRICS_PORT"
"""Overrides the port of the driver's ``/metrics`` (0: no endpoint)."""
METRICS_ADDRESS_ENV = "GRPO_DRIVER_METRICS_ADDRESS"
"""The address the driver's ``/metrics`` listens on (default: every address of the pod). A
host running several drivers without network namespaces gives each its own."""

# --- Stopping -------------------------------------------------------------------------------------

STOP_SLACK_S = 20
"""How much longer than the stop wait the driver waits for the stopped job to end: Ray marks the
job STOPPED only after the entrypoint exited (or was killed), and the driver polls."""


def default_stop_timeout_s(environ: dict[str, str]) -> float:
    """The driver's stop timeout: $GRPO_DRIVER_STOP_TIMEOUT_S, else the stop wait in its own
    environment (or Ray's default) plus STOP_SLACK_S."""
    if environ.get(STOP_TIMEOUT_ENV):
        return float(environ[STOP_TIMEOUT_ENV])
    wait = float(environ.get(JOB_STOP_WAIT_ENV) or RAY_DEFAULT_JOB_STOP_WAIT_S)
    return wait + STOP_SLACK_S


# --- Metrics --------------------------------------------------------------------------------------


def parse_port(text: str) -> int:
    """A TCP port number (0 included); ValueError otherwise."""
    port = int(text)
    if not 0 <= port <= 65535:
        raise ValueError(f"{text} is not a port number")
    return port


def default_metrics_port(environ: dict[str, str]) -> int:
    """$GRPO_DRIVER_METRICS_PORT, else DRIVER_METRICS_PORT (the driver container's ``metrics``
    port); ValueError when the variable is not a port number."""
    text = environ.get(METRICS_PORT_ENV)
    return parse_port(text) if text else DRIVER_METRICS_PORT


def metrics_address(environ: dict[str, str]) -> str:
    return environ.get(METRICS_ADDRESS_ENV) or "0.0.0.0"


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
DEFAULT_REPORT_TIMEOUT_S = 120.0
"""After the job ended, how long a failed write of the terminal report is retried (waits from
1 s doubling up to 15 s). As long as the driver bears an unreachable head: enough for an API
server restart or a control-plane upgrade; a longer wait keeps the finished attempt's RayCluster
(its GPUs) for nothing when the API server is gone for good, since the next attempt reports
again from the final checkpoint."""
