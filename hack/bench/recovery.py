"""Recovery: a pod lost → training resumed, per recovery granularity, and for a Ray worker pod.

The mechanism of ``make demo DEMO=recovery`` (``demo.driving``): the tiny example made long
enough to interrupt, its first driver pod deleted (as a node drain would) once the trainer has
checkpointed step ``KILL_AFTER_STEPS``, on the local cluster with the real trainer, real local
Ray nodes and the operator — once per granularity; and once more on two Ray worker pods
(``DEMO=multinode``'s run) with a worker pod deleted instead, which KubeRay replaces while the
operator starts the next attempt on the same RayCluster. Each run goes on to its end. Read
afterwards from the
trainer's reports (each stamped by the trainer's clock, in whole seconds) in the drivers' logs
and from the second attempt's driver Job:

- from the deletion to the operator's new driver Job, to the trainer restored from the
  checkpoint (attempt 2's Starting report naming the step it resumed from), and to training
  resumed (attempt 2's first report in state Running: its first step done);
- steps lost: the steps attempt 1 had completed when it stopped (its last report) minus the
  step attempt 2 resumed from.
"""

from __future__ import annotations

import datetime
import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client

from bench import report
from bench.tables import markdown_table
from demo import inputs
from demo.driving import (
    KILL_AFTER_STEPS,
    apply_and_follow,
    driver_pods,
    for_multinode,
    for_recovery,
    worker_pods,
)
from grpo_operator.naming import ChildNames
from grpo_trainer.reporting import parse_report_line
from localcluster import LocalCluster
from localcluster.operator_process import OperatorProcess

GRANULARITIES = ("sibling", "promptGroup")
# (what is lost, recoveryGranularity): the driver under each granularity, then a worker pod.
SCENARIOS = (*(("driver pod", g) for g in GRANULARITIES), ("Ray worker pod", "sibling"))
RUN_TIMEOUT = 900
CRD = inputs.REPO / "crds" / "grporuns.grpo.dev.yaml"


def reports_in(log: Path | None) -> list[dict]:
    """The trainer's reports in a driver's log, in the order written."""
    if log is None:
        return []
    lines = log.read_text(errors="replace").splitlines()
    return [json.loads(found[0]) for found in map(parse_report_line, lines) if found]


def _time(doc: dict) -> float:
    return datetime.datetime.fromisoformat(doc["time"]).timestamp()


def _steps(doc: dict) -> int:
    return (doc.get("ledger") or {}).get("completedSteps") or 0


@dataclass(frozen=True)
class Recovery:
    lost: str  # the pod deleted
    granularity: str
    phase: str
    checkpoint_step: int  # the newest checkpoint when the driver was deleted
    steps_done: int  # by attempt 1 when it stopped
    resumed_from: int | None
    new_driver_seconds: float | None  # from the deletion
    restored_seconds: float | None
    resumed_seconds: float | None
    reused_groups: int | None
    abandoned_attempts: int | None

    @property
    def steps_lost(self) -> int | None:
        return None if self.resumed_from is None else self.steps_done - self.resumed_from


def recovery(lost: str, granularity: str, killed_at: float, checkpoint_step: int,
             first: list[dict], second: list[dict], second_job_created: float | None,
             status: dict) -> Recovery:
    """The recovery from a deletion at ``killed_at`` (Unix seconds), from the reports of
    attempts 1 and 2 and the creation of attempt 2's driver Job."""
    restored = next((doc for doc in second
                     if (doc.get("recovery") or {}).get("resumedFromStep") is not None), None)
    running = next((doc for doc in second if doc["state"] == "Running"), None)
    rollout = (status.get("recovery") or {}).get("rollout") or {}

    def since_kill(at: float | None) -> float | None:
        return None if at is None else at - killed_at

    return Recovery(
        lost=lost,
        granularity=granularity,
        phase=status.get("phase", "?"),
        checkpoint_step=checkpoint_step,
        steps_done=_steps(first[-1]) if first else 0,
        resumed_from=restored["recovery"]["resumedFromStep"] if restored else None,
        new_driver_seconds=since_kill(second_job_created),
        restored_seconds=since_kill(_time(restored) if restored else None),
        resumed_seconds=since_kill(_time(running) if running else None),
        reused_groups=rollout.get("reusedGroups"),
        abandoned_attempts=rollout.get("abandonedAttempts"),
    )


def _interrupted_run(lost: str, granularity: str, work: Path) -> dict:
    body = for_recovery(inputs.load_example())
    name = f"recovery-{granularity.lower()}"
    if lost != "driver pod":
        body, name = for_multinode(body), "recovery-worker"
    body = inputs.relocate(body, work / name)
    body["metadata"]["name"] = name
    body["spec"]["runPolicy"]["recoveryGranularity"] = granularity
    return body


def _created(api: client.ApiClient, namespace: str, job: str) -> float | None:
    found = client.BatchV1Api(api).list_namespaced_job(
        namespace, field_selector=f"metadata.name={job}").items
    return found[0].metadata.creation_timestamp.timestamp() if found else None


def measure(scenarios: tuple[tuple[str, str], ...], progress: Callable[[str], None],
            namespace: str = "default") -> list[Recovery]:
    """One interrupted run per scenario, one after the other, on one local cluster."""
    work = Path(tempfile.mkdtemp(prefix="grpo-bench-recovery-"))
    results = []
    progress("recovery: starting a local cluster and the operator")
    try:
        with LocalCluster.start() as cluster:
            cluster.install_crd(CRD)
            api = cluster.api_client()
            try:
                with OperatorProcess(cluster, cluster.root / "operator.log",
                                     env=inputs.operator_settings(work)):
                    for lost, granularity in scenarios:
                        body = _interrupted_run(lost, granularity, work)
                        inputs.prepare(body)
                        status, _, killer = apply_and_follow(
                            cluster, body, RUN_TIMEOUT, namespace,
                            kill_driver_after=KILL_AFTER_STEPS,
                            out=lambda line: progress(f"  {line}"),
                            kill=driver_pods if lost == "driver pod" else worker_pods)
                        name = body["metadata"]["name"]
                        if killer.killed_at is None:
                            raise RuntimeError(f"{name}: the {lost} was never deleted "
                                               f"(phase {status.get('phase')})")
                        logs = [reports_in(cluster.driver_runner.job_log(
                            namespace, ChildNames(name).driver_job(attempt)))
                            for attempt in (1, 2)]
                        results.append(recovery(
                            lost, granularity, killer.killed_at, killer.checkpoint_step, *logs,
                            _created(api, namespace, ChildNames(name).driver_job(2)), status))
            finally:
                api.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def section(results: list[Recovery]) -> str:
    rows = [[r.lost, r.granularity, r.phase, r.checkpoint_step, r.steps_done, r.resumed_from,
             r.steps_lost, report.number(r.new_driver_seconds),
             report.number(r.restored_seconds), report.number(r.resumed_seconds),
             r.reused_groups, r.abandoned_attempts]
            for r in results]
    header = ["pod lost", "recoveryGranularity", "outcome", "checkpoint at kill",
              "steps done by attempt 1", "resumed from step", "steps lost",
              "kill → new driver Job (s)",
              "kill → trainer restored (s)", "kill → training resumed (s)", "reused groups",
              "abandoned attempts"]
    return "\n\n".join([
        "## Recovery",
        "`make demo DEMO=recovery`'s mechanism, once per `runPolicy.recoveryGranularity`: the "
        "tiny example on the CPU (real trainer, local Ray nodes, operator, KubeRay), its first "
        f"driver pod deleted once the trainer has checkpointed step {KILL_AFTER_STEPS}. The "
        "deletion is graceful, as a drain's: the driver stops the Ray job and the trainer may "
        "checkpoint on SIGTERM. Then the same on two Ray worker pods (`DEMO=multinode`'s run) "
        "with a worker pod deleted instead: its actors die with its Ray node, attempt 1 fails "
        "retryably and attempt 2 runs on the same RayCluster once KubeRay's replacement pod "
        "has joined. From the deletion: the operator's driver Job for attempt 2, the "
        "trainer restored from the checkpoint (attempt 2's Starting report naming the step), "
        "training resumed (attempt 2's first Running report: its first step done); the "
        "trainer stamps its reports in whole seconds. Steps lost: steps attempt 1 had done when "
        "it stopped minus the step attempt 2 resumed from. Reused groups and abandoned "
        "attempts: the run's rollout counts at its end. One run each, "
        f"{report.load()} at the end.",
        markdown_table(header, rows),
    ])


def sections(progress: Callable[[str], None],
             scenarios: tuple[tuple[str, str], ...] = SCENARIOS) -> list[str]:
    return [section(measure(scenarios, progress))]
