"""The reconcile loop: take a run from the work queue, observe it and its children (from the
watch-fed cache), decide (``reconcile.decide``, pure), record the status, then act."""

from __future__ import annotations

import datetime
import logging
import threading
import time
from functools import partial
from typing import Any

from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from grpo_operator.acceptance import claims, reward_config_map
from grpo_operator.api.constants import KIND, LABEL_RUN, ConditionType, Outcome, Phase, Reason
from grpo_operator.api.report import REPORT_KEY, REPORT_SIGNATURE_KEY, describe_validation_error
from grpo_operator.api.run_config import ResumeMode, RunConfig
from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.api.status import GRPORunStatus, Terminal
from grpo_operator.cache import CHILD_KINDS, SECRET_KIND
from grpo_operator.children import configmaps, identity
from grpo_operator.children.driver_job import driver_job
from grpo_operator.children.meta import RunRef
from grpo_operator.children.network_policy import RAY_CLUSTER_LABEL, network_policy
from grpo_operator.children.raycluster import ray_cluster
from grpo_operator.conditions import set_condition, set_wire_condition, summarize
from grpo_operator.errors import SpecInvalid, StatusUnreadable, describe, retry_delay
from grpo_operator.health import pod_ready
from grpo_operator.kube import ChildConflict, Kube, StaleStatus, merge_patch
from grpo_operator.metrics import Metrics
from grpo_operator.naming import ChildNames
from grpo_operator.reconcile import (
    Action,
    Decision,
    Event,
    Observed,
    Policy,
    decide,
    held_by_kueue,
)
from grpo_operator.recorder import EventRecorder
from grpo_operator.signing import run_ray_token, run_report_key
from grpo_operator.workqueue import WorkQueue

log = logging.getLogger(__name__)
# Warnings a pass would repeat while their cause lasts: each distinct one is said once.
_ANNOUNCED_ONCE = (Reason.REPORT_REJECTED, Reason.POD_NOT_STARTING)
# Failures that say what they are; anything else is logged with its traceback.
_EXPECTED_ERRORS = (ApiException, ChildConflict, StatusUnreadable, SpecInvalid)

Key = tuple[str, str]  # (namespace, name)
# After a status write that asked for no requeue, the run is looked at once more (decide may go
# on from what it just wrote, and its write's echo wakes nothing): after a second, long enough
# for that echo to reach the cache (the pass then reads no run by request).
SETTLE_SECONDS = 1.0
# How long after a change of the GRPORun CRD a watch may still send runs pruned by the old
# schema: the API server keeps the old storage until its requests have drained, at least 1 s
# and at most twice its request timeout (60 s by default; measured here: the old watch ended
# 1.2 s after the change, its last event pruned and not sent again).
SCHEMA_CHANGE_SECONDS = 120.0
# A child's watch event wakes its run this long after it, not at once, as the Job controller
# batches its pods' events (syncJobBatchPeriod): KubeRay makes a cluster's service and pods
# within a second, and KWOK or a kubelet move a pod through scheduled, running and ready as
# fast; one pass then reads them all instead of one pass (and status write) each. What a
# waiting run waits for wakes it at once: a Ray pod turning ready (the cluster's health is
# read from its pods) and a RayCluster's own events (KubeRay's status, its deletion).
CHILD_EVENT_BATCH_SECONDS = 1.0


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def _timestamp(value: str | None) -> datetime.datetime | None:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


class Controller:
    def __init__(self, kube: Kube, *, workers: int = 2, policy: Policy | None = None,
                 metrics: Metrics | None = None, sweep_seconds: float = 0,
                 namespaces: tuple[str, ...] = (), signing_key: bytes):
        self.kube = kube
        self.policy = policy or Policy()
        self.metrics = metrics or Metrics()
        self.queue = WorkQueue()
        self.signing_key = signing_key
        self.events = EventRecorder(kube.event)
        self._threads = [
            threading.Thread(target=self._work, name=f"reconcile-{i}", daemon=True)
            for i in range(workers)
        ]
        self.sweep_seconds = sweep_seconds
        self.namespaces = namespaces  # served (none: all), what a sweep lists
        self._stopped = threading.Event()
        self._refresh: threading.Timer | None = None  # the runs' listing after a CRD change
        if sweep_seconds:
            self._threads.append(threading.Thread(target=self._sweep_every, name="sweep",
                                                  daemon=True))
        # Rejected report texts per run, so a bad report is announced once, not every pass.
        self._announced: dict[Key, set[str]] = {}
        # API requests and passes per run, logged when the run is done with.
        self.cost: dict[Key, list[int]] = {}
        # Failed passes in a row per run (the backoff's exponent).
        self._failures: dict[Key, int] = {}

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._refresh is not None:
            self._refresh.cancel()
        self.queue.close()
        for t in self._threads:
            if t.ident is not None:  # a follower's workers never started
                t.join(10)
        self.events.flush(5)

    def _account(self, key: Key, done: bool) -> None:
        cost = self.cost.setdefault(key, [0, 0, 0])
        requests, reads = self.kube.take_request_count()
        cost[0] += requests
        cost[1] += reads
        cost[2] += 1
        if done:
            requests, reads, passes = self.cost.pop(key)
            log.info("run %s/%s: %d API requests (%d reads) in %d reconcile passes", *key,
                     requests, reads, passes)

    def enqueue(self, namespace: str, name: str, delay: float = 0.0) -> None:
        self.queue.add((namespace, name), delay)

    def run_event(self, event_type: str | None, body: dict[str, Any]) -> None:
        """A watch event of a run: the run is queued unless the event is an echo (waking the
        run at each of its own writes would also undo a failed pass's backoff)."""
        meta = body["metadata"]
        cache = self.kube.cache
        if event_type == "DELETED":
            # A run made anew under the same name keeps its queue entry, backoff and children.
            if cache.remove(KIND, body):
                cache.forget_run(meta["namespace"], meta["name"])
                self.forget(meta["namespace"], meta["name"])
            return
        cache.put(KIND, body)
        if not cache.is_echo(KIND, body):
            self.enqueue(meta["namespace"], meta["name"])

    def child_event(self, kind: str, event_type: str | None, body: dict[str, Any]) -> None:
        """A watch event of a run's child (a RayCluster turning ready, a Job failing, a report
        written; the cache has it already): its run is woken within
        ``CHILD_EVENT_BATCH_SECONDS`` (a RayCluster's and a ready pod's at once), unless the
        event is an echo."""
        if event_type == "DELETED":
            self.kube.cache.remove(kind, body)
        elif self.kube.cache.is_echo(kind, body):
            return
        at_once = kind == "RayCluster" or (kind == "Pod" and pod_ready(body))
        self._wake_owner(body, 0.0 if at_once else CHILD_EVENT_BATCH_SECONDS)

    def _wake_owner(self, child: dict[str, Any], delay: float = 0.0) -> None:
        meta = child["metadata"]
        run = (meta.get("labels") or {}).get(LABEL_RUN)
        # A run the cache does not hold is gone (its children go after it) or not delivered
        # yet (its own event will queue it).
        if run and self.kube.cache.holds(KIND, meta["namespace"], run):
            self.enqueue(meta["namespace"], run, delay)

    def crd_changed(self) -> None:
        """The GRPORun CRD's schema changed: for ``SCHEMA_CHANGE_SECONDS`` the API server may
        still serve watches from the old schema's storage, whose events are pruned by it and
        are not sent again. Passes meanwhile read their runs from the API server; then every
        run is listed anew and looked at once more."""
        log.info("the GRPORun CRD changed: runs are read from the API server for %.0f s",
                 SCHEMA_CHANGE_SECONDS)
        self.kube.cache.distrust_runs(SCHEMA_CHANGE_SECONDS)
        if self._refresh is not None:
            self._refresh.cancel()  # the window starts again: so does its end
        self._refresh = threading.Timer(SCHEMA_CHANGE_SECONDS, self.refresh_runs)
        self._refresh.daemon = True
        self._refresh.start()

    def refresh_runs(self) -> None:
        """List every run, replace the cached copies and queue each run."""
        cache = self.kube.cache
        try:
            since = cache.now()
            listed = [run for namespace in self.namespaces or (None,)
                      for run in self.kube.list_runs(namespace)]
        except Exception as error:  # noqa: BLE001 - runs are read from the API server meanwhile
            log.warning("listing the runs failed (tried again in %.0f s): %s",
                        SCHEMA_CHANGE_SECONDS, error)
            self.crd_changed()
            return
        finally:
            self.kube.take_request_count()  # not any run's cost
        cache.replace_runs(listed, since)
        for run in listed:
            self.enqueue(run["metadata"]["namespace"], run["metadata"]["name"])

    def sweep(self) -> int:
        """Check the children's cache against a listing of each watched kind: what went while
        a watch was broken (no event says so) is dropped and its run woken. Returns how many."""
        cache, gone = self.kube.cache, 0
        # Secrets are not watched (nor listed): what is remembered of them is forgotten, so a
        # run's next pass that needs them checks them again (and makes a deleted one anew).
        cache.sweep(SECRET_KIND.kind, set(), cache.now())
        for kind in CHILD_KINDS:
            since = cache.now()
            listed = set().union(*(self.kube.list_labelled(kind, namespace)
                                   for namespace in self.namespaces or (None,)))
            for child in cache.sweep(kind.kind, listed, since):
                log.info("%s %s/%s went unseen by the watch; dropped from the cache", kind.kind,
                         child["metadata"].get("namespace"), child["metadata"]["name"])
                self._wake_owner(child)
                gone += 1
        return gone

    def _sweep_every(self) -> None:
        while not self._stopped.wait(self.sweep_seconds):
            try:
                self.sweep()
            except Exception as error:  # noqa: BLE001 - the next sweep tries again
                log.warning("cache sweep failed: %s", error)
            finally:
                self.kube.take_request_count()  # not any run's cost

    def forget(self, namespace: str, name: str) -> None:
        self.queue.forget((namespace, name))
        self._announced.pop((namespace, name), None)
        self._failures.pop((namespace, name), None)
        self.cost.pop((namespace, name), None)
        self.metrics.forget((namespace, name))

    def _work(self) -> None:
        while True:
            key = self.queue.get()
            if key is None:
                return
            again: float | None = None
            started = time.monotonic()
            try:
                again = self.reconcile(*key)
                self._failures.pop(key, None)
            except StaleStatus as stale:  # not a failure: the next pass starts from now
                log.info("%s; its pass starts again", stale)
                again = 0.0
            except Exception as error:  # noqa: BLE001 - one run's failure must not stop the loop
                self.metrics.reconcile_errors.inc()
                failures = self._failures[key] = self._failures.get(key, 0) + 1
                again = retry_delay(failures)
                log.warning("reconcile of %s/%s failed (%d in a row, next in %.0f s): %s",
                            *key, failures, again, error,
                            exc_info=not isinstance(error, _EXPECTED_ERRORS))
                self._stalled(*key, error)
            finally:
                self.metrics.reconcile_duration.observe(time.monotonic() - started)
                self.queue.done(key)
                # A run needing no requeue is done with until its next event.
                self._account(key, done=again is None)
            if again is not None:
                self.queue.add(key, again)

    # -- one pass --------------------------------------------------------------------------

    def reconcile(self, namespace: str, name: str) -> float | None:
        body = self.kube.get_run(namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            # Children go with the run through their ownerReferences.
            self.forget(namespace, name)
            return None
        meta = body["metadata"]
        run = RunRef(name, namespace, meta["uid"])
        old_wire = body.get("status") or {}
        try:
            status = GRPORunStatus.model_validate(old_wire)
        except ValidationError as e:
            raise StatusUnreadable(describe_validation_error(e)) from None
        try:
            spec = GRPORunSpec.model_validate(body["spec"])
        except ValidationError as e:
            if status.phase not in (None, Phase.PENDING):
                raise SpecInvalid(describe_validation_error(e)) from None
            return self._invalid_spec(run, meta, status, old_wire, describe_validation_error(e))
        observed = self._observe(run, meta, spec, status)
        decision = decide(observed)
        version = self._record(run, observed, decision, old_wire, meta["resourceVersion"])
        self._act(run, spec, decision, made_before=status.children.ray_cluster is not None,
                  driver_made_before=status.active_since is not None)
        self._unstalled(run, observed, decision, version)
        if version != meta["resourceVersion"] and decision.requeue_after is None:
            # A written status is looked at once more before the run is left until its next
            # event: the write's own echo does not wake it (``run_event``).
            return SETTLE_SECONDS
        return decision.requeue_after

    def _observe(self, run: RunRef, meta: dict[str, Any], spec: GRPORunSpec,
                 status: GRPORunStatus) -> Observed:
        names = ChildNames(run.name)
        k, now = self.kube, _now()
        pvcs: dict[str, Any] = {}
        config_maps: dict[str, Any] = {}
        if status.phase in (None, Phase.PENDING):
            pvcs = {claim: k.get("v1", "PersistentVolumeClaim", run.namespace, claim)
                    for claim in claims(spec)}
            reward = reward_config_map(spec)
            if reward is not None:
                config_maps[reward] = k.get("v1", "ConfigMap", run.namespace, reward)
        rc = job = report = signature = None
        report_map_missing = False
        pods: list[dict[str, Any]] = []
        if status.children.ray_cluster:
            rc = k.get_child("RayCluster", run, names.ray_cluster)
        driver = status.children.driver_job
        if driver and (status.phase == Phase.RUNNING or status.stopping):
            job = k.get_child("Job", run, driver)
            # A failed driver's exit code, whether a stopped one is still finishing, or why a
            # driver that has not reported yet does not start.
            reported = (status.accepted_report is not None
                        and status.accepted_report.attempt == status.recovery.attempt)
            if status.stopping or (job is not None and (_job_failed(job) or not reported)):
                pods = [p for p in k.pods(run, {"job-name": driver}, None)
                        if _made_by_job(p, driver, job)]
            # An ended driver wrote its last report before it exited, but the report's watch
            # may deliver it after the Job's: how the attempt ended is judged on the report as
            # the API server holds it (once per attempt: the phase moves on).
            read = k.read_child if job is not None and _job_ended(job) else k.get_child
            cm = read("ConfigMap", run, names.report_config_map)
            report_map_missing = cm is None
            data = (cm or {}).get("data") or {}
            report, signature = data.get(REPORT_KEY), data.get(REPORT_SIGNATURE_KEY)
        cluster_pods = None
        if rc is not None:
            # KubeRay controls the pods it makes for the cluster.
            template = rc.get("spec", {}).get("headGroupSpec", {}).get("template", {})
            if LABEL_RUN in (template.get("metadata") or {}).get("labels", {}):
                cluster_pods = k.pods(run, {RAY_CLUSTER_LABEL: names.ray_cluster},
                                      rc["metadata"]["uid"])
            else:  # made before its pods were labelled: they are not in the cache
                cluster_pods = k.list_pods(run, f"{RAY_CLUSTER_LABEL}={names.ray_cluster}",
                                           rc["metadata"]["uid"])
        workload = (k.kueue_workload(run.namespace, rc["metadata"]["uid"])
                    if held_by_kueue(spec, rc) else None)
        return Observed(name=run.name, generation=meta.get("generation", 0), spec=spec,
                        status=status, now=now,
                        created=_timestamp(meta.get("creationTimestamp")),
                        annotations=meta.get("annotations") or {}, pvcs=pvcs,
                        config_maps=config_maps, ray_cluster=rc,
                        driver_job=job, driver_pods=pods, report_data=report,
                        report_map_missing=report_map_missing, report_signature=signature,
                        report_key=run_report_key(self.signing_key, run.uid),
                        cluster_pods=cluster_pods, kueue_workload=workload,
                        metering_runs=k.cache.count("RayCluster"), policy=self.policy)

    def _record(self, run: RunRef, observed: Observed | None, decision: Decision,
                old_wire: dict[str, Any], version: str) -> str:
        """Write the decided status over the one read at ``version`` (the pass's actions and
        Events follow only once it is written: its Events are queued, posted off the pass);
        returns the run's resourceVersion after."""
        new_wire = decision.status.to_wire()
        if new_wire != old_wire:
            version = self.kube.patch_status(run.namespace, run.name,
                                             merge_patch(old_wire, new_wire), version)
        if observed is not None:
            self.metrics.record((run.namespace, run.name), observed.status, decision.status,
                                observed.created)
        announced = self._announced.setdefault((run.namespace, run.name), set())
        for event in decision.events:
            if event.reason in _ANNOUNCED_ONCE:
                if event.message in announced:
                    continue
                announced.add(event.message)
            self.events.record(run, event.type, event.reason, event.message)
        return version

    def _act(self, run: RunRef, spec: GRPORunSpec, decision: Decision,
             made_before: bool, driver_made_before: bool) -> None:
        """``made_before``: the status read says a pass before this one made the run's
        children (the acceptance pass records them); ``driver_made_before``: the driver's own
        (the pass that first started a driver records ``activeSince``). Each picks whether a
        child the cache lacks is read first or created first (``Kube.create_if_absent``)."""
        k, status = self.kube, decision.status
        attempt = status.recovery.attempt
        ensure = partial(k.create_if_absent, expected=made_before)
        ensure_driver = partial(k.create_if_absent, expected=driver_made_before)
        for action in decision.actions:
            if action == Action.ENSURE_RUN_CHILDREN:
                config = RunConfig.build(
                    spec=spec, name=run.name, namespace=run.namespace, uid=run.uid,
                    attempt=attempt, resume=ResumeMode.NONE if attempt == 1 else ResumeMode.LATEST,
                    report_config_map=ChildNames(run.name).report_config_map,
                    inputs=status.recovery.inputs,
                )
                # What the Ray pods need first (the policy before the cluster: its pods are
                # never open to all), then the cluster. What only the driver needs is made
                # with the driver, once the cluster is ready: while KubeRay brings clusters up
                # it waits on the same API server.
                k.concurrently(
                    partial(ensure, identity.service_account(run)),
                    partial(ensure, identity.auth_secret(
                        run, run_ray_token(self.signing_key, run.uid))),
                    partial(k.ensure_config_map, configmaps.run_config_map(run, config)),
                    partial(ensure, network_policy(run)),
                )
                ensure(ray_cluster(spec, run))
            elif action == Action.ENSURE_DRIVER_JOB:
                # The trainer's grant on its report, the report's key and the report itself
                # before the Job whose pod mounts them. The binding after its Role: without
                # the `bind` verb the operator may bind only what it holds itself, which the
                # API server checks by reading the Role (404 while it is not there yet).
                k.concurrently(*(partial(ensure_driver, obj) for obj in (
                    identity.role(run),
                    identity.report_key_secret(run, run_report_key(self.signing_key, run.uid)),
                    configmaps.report_config_map(run),
                )))
                ensure_driver(identity.role_binding(run))
                k.create_if_absent(driver_job(spec, run, attempt))
            elif action == Action.DELETE_RAY_CLUSTER:
                # Foreground: the RayCluster stays (Deleting) until its pods are gone. The next
                # attempt reuses its name, and KubeRay finds pods by the ray.io/cluster label,
                # so a new cluster made while the old pods still run would adopt them as its
                # own and report ready on nodes about to be deleted.
                k.delete("ray.io/v1", "RayCluster", run.namespace,
                         ChildNames(run.name).ray_cluster, propagation="Foreground")
            elif action == Action.DELETE_RUN:
                k.delete_run(run.namespace, run.name)
        for job in decision.delete_jobs:
            k.delete("batch/v1", "Job", run.namespace, job)

    def _unstalled(self, run: RunRef, observed: Observed, decision: Decision,
                   version: str) -> None:
        """A whole pass went through (its actions too): a Stalled its failing passes set is
        over. Written only after the actions, or a pass failing in them would flip the
        condition twice per pass, and each write would wake the run again at once, defeating
        the backoff. (An ended run's Stalled is how it ended: ``decide`` keeps it.)"""
        status = decision.status
        stalled = status.condition(ConditionType.STALLED)
        ended = status.phase is not None and status.phase.is_terminal
        if stalled is None or stalled.status != "True" or ended:
            return
        status.conditions = set_condition(status.conditions, ConditionType.STALLED, False,
                                          "Reconciled", "the last pass went through",
                                          generation=observed.generation, now=observed.now)
        summarize(status, generation=observed.generation, now=observed.now)
        self.kube.patch_status(run.namespace, run.name,
                               {"conditions": [c.to_wire() for c in status.conditions]}, version)

    def _stalled(self, namespace: str, name: str, error: BaseException) -> None:
        """Say on the run why its pass failed: the Stalled condition (written on the status as
        stored, which may be one the models cannot read) and one Event per distinct error."""
        reason, message = describe(error)
        try:
            body = self.kube.get_run(namespace, name)
            if body is None:
                return
            meta, wire = body["metadata"], body.get("status") or {}
            conditions = wire.get("conditions") or []
            updated = conditions
            # Reconciling False beside it: kstatus takes the first of the two it finds True.
            for type_, value in ((ConditionType.STALLED, True),
                                 (ConditionType.RECONCILING, False)):
                updated = set_wire_condition(updated, type_, value, reason, message,
                                             generation=meta.get("generation"), now=_now())
            if updated != conditions:
                self.kube.patch_status(namespace, name, {"conditions": updated},
                                       meta["resourceVersion"])
            announced = self._announced.setdefault((namespace, name), set())
            if message not in announced:
                announced.add(message)
                self.events.record(RunRef(name, namespace, meta["uid"]), "Warning", reason,
                                   message)
        except Exception as e:  # noqa: BLE001 - the next pass tries again
            log.warning("could not record the failure on %s/%s: %s", namespace, name, e)

    def _invalid_spec(self, run: RunRef, meta: dict[str, Any], status: GRPORunStatus,
                      old_wire: dict[str, Any], message: str) -> None:
        """A new run's spec the models refuse (the CRD let it through: an older CRD, or a rule
        only the models check): it fails and nothing is created."""
        now, generation = _now(), meta.get("generation", 0)
        for type_ in (ConditionType.ACCEPTED, ConditionType.FAILED):
            status.conditions = set_condition(
                status.conditions, type_, type_ == ConditionType.FAILED, "InvalidSpec", message,
                generation=generation, now=now,
            )
        status.phase = Phase.FAILED
        status.observed_generation = generation
        status.terminal = Terminal(outcome=Outcome.FAILED, reason="InvalidSpec", message=message,
                                   finished_time=now)
        status.completion_time = now
        summarize(status, generation=generation, now=now)
        decision = Decision(status=status, events=[Event("Warning", "InvalidSpec", message)])
        self._record(run, None, decision, old_wire, meta["resourceVersion"])
        return None


def _made_by_job(pod: dict[str, Any], name: str, job: dict[str, Any] | None) -> bool:
    """A pod the driver Job made (anyone may label a pod job-name=...): controlled by a Job of
    that name, the one observed when it still exists."""
    return any(r.get("controller") and r.get("kind") == "Job" and r.get("name") == name
               and (job is None or r.get("uid") == job["metadata"]["uid"])
               for r in (pod.get("metadata") or {}).get("ownerReferences") or [])


def _job_failed(job: dict[str, Any]) -> bool:
    return _job_condition(job, ("Failed",))


def _job_ended(job: dict[str, Any]) -> bool:
    return _job_condition(job, ("Failed", "Complete"))


def _job_condition(job: dict[str, Any], types: tuple[str, ...]) -> bool:
    return any(c.get("type") in types and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])
