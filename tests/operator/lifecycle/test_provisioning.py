"""An accepted run gets its children and its RayCluster; deleting it takes them all."""

from __future__ import annotations

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from grpo_operator.api.constants import GROUP, PLURAL, VERSION
from tests.operator.lifecycle.runs import manifest
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

# What the Ray pods need, and the cluster; the driver's own grant, report key and report come
# with the driver, once the cluster is ready.
EXPECTED_CHILDREN = {
    "ServiceAccount": ["stuck-trainer"],
    "ConfigMap": ["stuck-run-config"],
    "Secret": ["stuck-ray-auth"],
    "RayCluster": ["stuck"],
}
# Once the driver started: the driver's own objects beside the run's (their name suffixes).
STARTED_CHILDREN = {
    "ConfigMap": ["report", "run-config"],
    "Secret": ["ray-auth", "report-key"],
    "Role": ["trainer"],
    "RoleBinding": ["trainer"],
}


def _stuck_run(runs, tmp_path, name="stuck"):
    """A run whose workers fit no node (16 GPUs each): it stays Provisioning."""
    runs.create(manifest(name, str(tmp_path), resources__gpusPerWorker=16))
    wait_for(lambda: runs.phase(name) == "Provisioning", 30, what="Provisioning")


def test_provisioning_creates_the_run_children_and_waits_for_the_cluster(runs, kstatus,
                                                                         tmp_path):
    created = runs.create(manifest("stuck", str(tmp_path), resources__gpusPerWorker=16))
    # Before the operator's first pass, the API server's default says generation 1 is not yet
    # observed: a GitOps tool waits instead of calling the run healthy.
    assert created["status"]["observedGeneration"] == 0 and "phase" not in created["status"]
    assert kstatus(created) == (
        "InProgress", "GRPORun generation is 1, but latest observed generation is 0")
    wait_for(lambda: runs.phase("stuck") == "Provisioning", 30, what="Provisioning")
    # A pass may fail once right after the create (a 404 seen in CI): Stalled, then retried.
    wait_for(lambda: runs.kstatus("stuck") == ("InProgress", "provisioning: step 0/2"), 30,
             what="kstatus InProgress")
    assert wait_for(lambda: runs.children("stuck") == EXPECTED_CHILDREN and runs.children("stuck"),
                    30, what="the children")
    status = runs.status("stuck")
    assert runs.condition("stuck", "Accepted")["status"] == "True"
    assert runs.condition("stuck", "ClusterReady")["status"] == "False"
    assert status["recovery"]["attempt"] == 1
    assert status["children"]["rayCluster"] == "stuck"
    assert status["ledger"]["plannedSteps"] == 2
    # No driver before the cluster is healthy.
    assert "Job" not in runs.children("stuck")
    # Why: the scheduler's word on the worker pod, on the run.
    ready = wait_for(lambda: "is unschedulable" in runs.condition("stuck", "ClusterReady")[
        "message"] and runs.condition("stuck", "ClusterReady"), 60, what="the reason shown")
    assert "Insufficient nvidia.com/gpu" in ready["message"], ready
    runs.posted("stuck", lambda e: e[:2] == ("Warning", "PodNotStarting"),
                what="the PodNotStarting Warning")


def test_deleting_a_provisioning_run_takes_its_children(runs, tmp_path):
    _stuck_run(runs, tmp_path)
    wait_for(lambda: "RayCluster" in runs.children("stuck"), 30, what="the RayCluster")
    runs.delete("stuck")
    wait_for(lambda: runs.children("stuck") == {}, 60, what="garbage collection")
    with pytest.raises(ApiException) as gone:
        runs.get("stuck")
    assert gone.value.status == 404


def test_the_run_identity_reaches_only_its_report(cluster, runs, tmp_path):
    # Runs that get as far as their driver (whose trainer then refuses the empty inputs): the
    # driver's objects stay after the end, with the run.
    for name in ("mine", "theirs"):
        runs.create(manifest(name, str(tmp_path)))
    for name in ("mine", "theirs"):
        wanted = {kind: [f"{name}-{n}" for n in names] for kind, names in STARTED_CHILDREN.items()}
        wait_for(lambda n=name, w=wanted: {k: runs.children(n).get(k) for k in w} == w, 180,
                 what=f"{name}'s driver children")
    token = runs.core.create_namespaced_service_account_token(
        "mine-trainer", runs.namespace,
        client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[])),
    ).status.token
    path = cluster.write_kubeconfig(cluster.root / f"{runs.namespace}-mine.kubeconfig",
                                    user="mine-trainer", token=token)
    as_run = config.new_client_from_config(config_file=str(path))
    core = client.CoreV1Api(as_run)

    def patch_own_report():
        try:
            return core.patch_namespaced_config_map("mine-report", runs.namespace,
                                                    {"data": {"report.json": "{}"}})
        except ApiException as e:
            if e.status != 403:
                raise
            return None

    # The RBAC authorizer reads bindings from its own watch: a new one takes a moment to count.
    patched = wait_for(patch_own_report, 10, what="the run identity to patch its report")
    assert patched.data["report.json"] == "{}"

    def denied(call, *args) -> int:
        with pytest.raises(ApiException) as refused:
            call(*args)
        return refused.value.status

    assert denied(core.read_namespaced_config_map, "theirs-report", runs.namespace) == 403
    assert denied(core.patch_namespaced_config_map, "mine-run-config", runs.namespace,
                  {"data": {}}) == 403
    assert denied(core.list_namespaced_secret, runs.namespace) == 403
    assert denied(client.CustomObjectsApi(as_run).get_namespaced_custom_object,
                  GROUP, VERSION, runs.namespace, PLURAL, "mine") == 403
    as_run.close()


def test_deleting_a_running_run_takes_its_driver_and_cluster(cluster, runs, tmp_path):
    from tests.operator.lifecycle.runs import tiny_example

    body = tiny_example(tmp_path)
    name = body["metadata"]["name"]
    runs.create(body)
    wait_for(lambda: runs.phase(name) == "Running" and "Job" in runs.children(name), 120,
             what="the driver Job")
    wait_for(lambda: [p for p in runs.core.list_namespaced_pod(
        runs.namespace, label_selector=f"job-name={name}-a1").items
        if p.status.phase == "Running"], 120, what="the driver running")
    runs.delete(name)
    wait_for(lambda: runs.children(name) == {}, 90, what="garbage collection")
    wait_for(lambda: not runs.core.list_namespaced_pod(runs.namespace).items, 90,
             what="every pod of the run to go")
    wait_for(lambda: not cluster.ray_pods.nodes(runs.namespace, name), 60,
             what="the run's Ray nodes to stop")
