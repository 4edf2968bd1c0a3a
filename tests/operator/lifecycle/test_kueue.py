"""GRPORuns queued by the real Kueue (its controller manager built from its Go module, with the
RayCluster and Job integrations, as docs/kueue.md sets it up): a run waits Queued while its
ClusterQueue's quota is used and starts when the quota frees; the quota is released when a run
ends; a higher-priority workload preempts a running run, which checkpoints before its Ray pods
go, waits Queued again and resumes from that checkpoint when readmitted — no restart counted.

Each test has a ClusterQueue of its own (selecting only its namespace) behind a LocalQueue
``team-a``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from grpo_operator.api.constants import KUEUE_QUEUE_LABEL
from localcluster.kueue import start_kueue
from tests.operator.lifecycle.runs import manifest, tiny_example
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.second_cluster]
KUEUE = ("kueue.x-k8s.io", "v1beta2")
LOCAL_QUEUE = "team-a"
FLAVOR = "default-flavor"
LOW, HIGH = "grpo-test-low", "grpo-test-high"


@pytest.fixture(scope="session")
def kueue(cluster, k8s_api):
    """Kueue for the rest of the session, a flavor, and two pod priority classes (Kueue takes a
    workload's priority from its pods' PriorityClass when it names no WorkloadPriorityClass)."""
    manager = start_kueue(cluster)
    client.CustomObjectsApi(k8s_api).create_cluster_custom_object(*KUEUE, "resourceflavors", {
        "apiVersion": "/".join(KUEUE), "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}})
    scheduling = client.SchedulingV1Api(k8s_api)
    for name, value in ((LOW, 100), (HIGH, 1000)):
        scheduling.create_priority_class(client.V1PriorityClass(
            metadata=client.V1ObjectMeta(name=name), value=value))
    return manager


class Queue:
    """A ClusterQueue for one namespace and its LocalQueue ``team-a``."""

    def __init__(self, api: client.ApiClient, namespace: str):
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.name = f"cq-{namespace}"

    def create(self, *, cpu: str, memory: str, gpus: int) -> None:
        self.custom.create_cluster_custom_object(*KUEUE, "clusterqueues", {
            "apiVersion": "/".join(KUEUE), "kind": "ClusterQueue",
            "metadata": {"name": self.name},
            "spec": {
                "namespaceSelector": {"matchLabels": {
                    "kubernetes.io/metadata.name": self.namespace}},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [{
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                    "flavors": [{"name": FLAVOR, "resources": [
                        {"name": "cpu", "nominalQuota": cpu},
                        {"name": "memory", "nominalQuota": memory},
                        {"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}})
        self.custom.create_namespaced_custom_object(*KUEUE, self.namespace, "localqueues", {
            "apiVersion": "/".join(KUEUE), "kind": "LocalQueue",
            "metadata": {"name": LOCAL_QUEUE}, "spec": {"clusterQueue": self.name}})
        wait_for(lambda: self._active(), 30, what="the ClusterQueue active")

    def _active(self) -> bool:
        status = self.status()
        return any(c["type"] == "Active" and c["status"] == "True"
                   for c in status.get("conditions") or [])

    def status(self) -> dict:
        return self.custom.get_cluster_custom_object(*KUEUE, "clusterqueues",
                                                     self.name).get("status") or {}

    def workload_of(self, ray_cluster: dict) -> dict | None:
        """Kueue's Workload for a RayCluster (owned by it)."""
        uid = ray_cluster["metadata"]["uid"]
        items = self.custom.list_namespaced_custom_object(*KUEUE, self.namespace,
                                                          "workloads")["items"]
        return next((w for w in items if any(o["uid"] == uid for o in
                                             w["metadata"].get("ownerReferences") or [])), None)

    def delete(self) -> None:
        with contextlib.suppress(client.ApiException):
            self.custom.delete_cluster_custom_object(*KUEUE, "clusterqueues", self.name)


@pytest.fixture
def queue(runs, kueue) -> Iterator[Queue]:
    made = Queue(runs.api, runs.namespace)
    yield made
    made.delete()


def condition(workload: dict | None, kind: str) -> dict:
    return next((c for c in ((workload or {}).get("status") or {}).get("conditions") or []
                 if c["type"] == kind), {})


def test_queued_while_quota_is_used_then_admitted_and_released(cluster, runs, queue, tmp_path):
    # 16 GPUs per worker: all the queue's quota, and more than any 8-GPU node has, so an
    # admitted cluster stays unready (nothing trains in this test).
    queue.create(cpu="10", memory="10Gi", gpus=16)
    big = {"resources__gpusPerWorker": 16, "runPolicy__queueName": LOCAL_QUEUE}
    runs.create(manifest("first", str(tmp_path), **big))
    # Admission is what starts the pre-running clock (a queued run is Provisioning for a pass
    # before its cluster is first seen, held or not).
    wait_for(lambda: "preRunningSince" in runs.status("first"), 60, what="first admitted")
    assert runs.phase("first") == "Provisioning"
    first_cluster = runs.ray_cluster("first")
    assert first_cluster["metadata"]["labels"][KUEUE_QUEUE_LABEL] == LOCAL_QUEUE
    assert not first_cluster["spec"].get("suspend")
    assert condition(queue.workload_of(first_cluster), "Admitted")["status"] == "True"

    runs.create(manifest("second", str(tmp_path), **big))
    second_cluster = wait_for(lambda: runs.ray_cluster("second"), 30, what="second cluster")
    wait_for(lambda: runs.phase("second") == "Queued", 30, what="second Queued")
    reserved = wait_for(lambda: condition(queue.workload_of(second_cluster), "QuotaReserved")
                        or None, 30, what="Kueue's verdict on the second")
    assert reserved["status"] == "False" and "insufficient" in reserved["message"], reserved
    # Kueue's words reach the run: `kubectl get grpo -o wide` says Queued, and why.
    wait_for(lambda: "insufficient" in (runs.condition("second", "ClusterReady") or {}).get(
        "message", ""), 30, what="Kueue's verdict in the run's status")
    table = cluster.kubectl("get", "grpo", "second", "-n", runs.namespace, "-o", "wide").stdout
    assert "Queued" in table and reserved["message"][:60] in table, table
    time.sleep(5)  # a few reconcile passes: still held, nothing started
    status = runs.status("second")
    assert status["phase"] == "Queued" and "preRunningSince" not in status
    assert runs.ray_cluster("second")["spec"]["suspend"] is True
    assert status["recovery"]["restarts"] == 0

    runs.delete("first")  # its RayCluster goes with it, and its quota
    wait_for(lambda: "preRunningSince" in runs.status("second"), 60, what="second admitted")
    assert runs.phase("second") == "Provisioning"

    # A run without a queue: Kueue leaves its RayCluster alone (no queue label, not held).
    runs.create(manifest("unqueued", str(tmp_path), resources__gpusPerWorker=16))
    plain = wait_for(lambda: runs.ray_cluster("unqueued"), 30, what="the unqueued cluster")
    assert KUEUE_QUEUE_LABEL not in plain["metadata"].get("labels", {})
    assert not plain["spec"].get("suspend")
    assert queue.workload_of(plain) is None

    runs.delete("second")
    wait_for(lambda: queue.status().get("admittedWorkloads", 0) == 0
             and queue.status().get("reservingWorkloads", 0) == 0, 60,
             what="the quota released")


def test_preempted_run_checkpoints_first_and_resumes(runs, queue, tmp_path):
    # Room for one run: the tiny example's head (1 CPU) and worker (2 CPUs).
    queue.create(cpu="3", memory="8Gi", gpus=16)
    body = tiny_example(tmp_path)
    name = body["metadata"]["name"]
    spec = body["spec"]
    spec["algorithm"]["maxSteps"] = 6
    spec["algorithm"].pop("evalIntervalSteps")
    spec["checkpoint"]["intervalSteps"] = 100  # no periodic checkpoint: only the preemption's
    spec["runPolicy"]["queueName"] = LOCAL_QUEUE
    spec["resources"]["priorityClassName"] = LOW
    runs.create(body)
    wait_for(lambda: runs.ledger(name).get("completedSteps", 0) >= 2, 300,
             what="two steps before the preemption")

    # A higher-priority run of the same shape needs the quota: Kueue preempts the first. Its
    # 16-GPU worker never schedules, so it holds the quota without training.
    urgent = manifest("urgent", str(tmp_path), resources__gpusPerWorker=16,
                      resources__priorityClassName=HIGH, runPolicy__queueName=LOCAL_QUEUE,
                      resources__worker={"cpu": "2", "memory": "4Gi"},
                      resources__head={"cpu": "1", "memory": "2Gi"})
    runs.create(urgent)
    wait_for(lambda: runs.phase(name) == "Queued", 120, what="the preempted run Queued")
    done_before = runs.ledger(name)["completedSteps"]
    evicted = condition(queue.workload_of(runs.ray_cluster(name)), "Evicted")
    assert evicted.get("reason") == "Preempted", evicted
    status = runs.status(name)
    assert status["recovery"]["attempt"] == 2
    assert status["recovery"]["restarts"] == 0
    assert "waiting for Kueue" in runs.condition(name, "ClusterReady")["message"]
    wait_for(lambda: "preRunningSince" in runs.status("urgent"), 60, what="urgent admitted")

    runs.delete("urgent")  # its quota frees: the first run is admitted again and resumes
    wait_for(lambda: runs.phase(name) == "Succeeded", 600, what="the resumed run done")
    recovery = runs.status(name)["recovery"]
    # With no periodic checkpoint, the only checkpoint is the one the trainer wrote when the
    # preStop hook stopped it, before its pods went: at least every step seen done by then.
    assert recovery["resumedFromStep"] >= max(done_before, 2), (recovery, done_before)
    assert recovery["restarts"] == 0  # a preemption is not a failure
    assert [h["reason"] for h in recovery["history"]] == ["Started", "Preempted"]
    wait_for(lambda: queue.status().get("admittedWorkloads", 0) == 0, 60,
             what="the quota released at the end")
