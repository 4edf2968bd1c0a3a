"""``python -m grpo_trainer drain``: a preStop hook for Ray pods — a Ray pod that is going away
has the trainer checkpoint first.

The trainer's state lives in actors on the worker pods, so a checkpoint needs every pod alive
until it is written. When a RayCluster's pods are deleted without the operator asking first —
Kueue preempting the run (it suspends the RayCluster and KubeRay deletes the pods), a node
drained, the cluster deleted by hand — the kubelet runs this hook in each pod before it sends
SIGTERM, and the pod's ``terminationGracePeriodSeconds`` bounds hook and shutdown together.

Every pod does the same: ask the head's Jobs API to stop each job still active (Ray sends the
trainer SIGTERM: it checkpoints and exits, within ``RAY_JOB_STOP_WAIT_TIME_S``, which the
operator sets to the grace period) and wait until none is active. The head is reached at its
own pod's address on the head pod and through ``FQ_RAY_IP`` (the head Service, set by KubeRay)
on a worker; KubeRay's ``RAY_ADDRESS`` (the GCS) is not used. A stop asked by several pods is
one stop; a head that does not answer (gone already, or not started) means there is nothing
left to wait for. The hook always exits 0: a failing preStop hook only makes the kubelet log an
event, and the pod goes anyway.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import time

from grpo_operator.api.ray_job import (
    DASHBOARD_PORT,
    JOB_STOP_WAIT_ENV,
    RAY_DEFAULT_JOB_STOP_WAIT_S,
)

log = logging.getLogger("grpo_trainer.drain")

HEAD_ADDRESS_ENV = "FQ_RAY_IP"  # KubeRay's, on worker pods: the head Service's name
TOKEN_ENV = "RAY_AUTH_TOKEN"  # KubeRay's, with authOptions mode token
POLL_S = 0.5
REQUEST_TIMEOUT_S = 5.0
SLACK_S = 10.0
"""Waited beyond the stop wait: Ray marks a job stopped only after its entrypoint exited."""


def head_address(env: dict[str, str]) -> str:
    """The head Service on a worker; on the head, its own pod's address (its hostname, which
    the pod's /etc/hosts maps to the pod IP the dashboard serves on)."""
    return f"http://{env.get(HEAD_ADDRESS_ENV) or socket.gethostname()}:{DASHBOARD_PORT}"


def drain(address: str, token: str | None, bound_s: float) -> None:
    """Stop every active job at ``address`` and wait (at most ``bound_s``) until none is
    active."""
    from grpo_trainer.driver.client import BoundedJobClient, describe_error

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    deadline = time.monotonic() + bound_s
    try:
        client = BoundedJobClient(address, headers=headers, request_timeout=REQUEST_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - no head: nothing runs that could checkpoint
        log.info("the head at %s does not answer (%s): nothing to drain", address,
                 describe_error(exc))
        return
    asked: set[str] = set()
    while True:
        try:
            active = [j for j in client.list_jobs()
                      if j.submission_id and not j.status.is_terminal()]
            for job in active:
                if job.submission_id not in asked:
                    log.info("stopping job %s (%s) so that it checkpoints", job.submission_id,
                             job.status)
                    client.stop_job(job.submission_id)
                    asked.add(job.submission_id)
        except Exception as exc:  # noqa: BLE001 - the head went away: the jobs went with it
            log.info("the head at %s stopped answering (%s)", address, describe_error(exc))
            return
        if not active:
            log.info("no job active at %s", address)
            return
        if time.monotonic() >= deadline:
            log.warning("jobs still active after %.0f s: %s", bound_s,
                        [j.submission_id for j in active])
            return
        time.sleep(POLL_S)


def handle(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s drain: %(message)s")
    env = dict(os.environ)
    # KubeRay's RAY_ADDRESS (the GCS, host:port) makes Ray's Jobs API client look for the GCS
    # first, up to 30 s when it is already gone: the hook speaks only HTTP to the Jobs API.
    os.environ.pop("RAY_ADDRESS", None)
    stop_wait = float(env.get(JOB_STOP_WAIT_ENV) or RAY_DEFAULT_JOB_STOP_WAIT_S)
    drain(args.address or head_address(env), env.get(TOKEN_ENV), stop_wait + SLACK_S)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "drain", help="a preStop hook for Ray pods: stop the active jobs (the trainer "
        "checkpoints) and wait until they ended")
    parser.add_argument("--address", help="the head's Jobs API (default: this pod's own on the "
                        f"head, the head Service in ${HEAD_ADDRESS_ENV} on a worker)")
    parser.set_defaults(handler=handle)
