"""The driver-pod runner plays the kubelet for driver pods: real local processes, real exit
codes in pod status, volumes and the service-account token mounted where the pod says, and a
pod deletion delivered as SIGTERM."""

from __future__ import annotations

import json
import textwrap

import pytest
from kubernetes import client

from grpo_operator.api.constants import LABEL_ROLE, ROLE_DRIVER
from localcluster.components import DRIVER_SELECTOR
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

# The label the operator puts on driver pods is the one the harness runs for real.
DRIVER_LABELS = {LABEL_ROLE: ROLE_DRIVER}
assert f"{LABEL_ROLE}={ROLE_DRIVER}" == DRIVER_SELECTOR


def driver_job(name: str, code: int) -> client.V1Job:
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(
            backoff_limit=0,
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=DRIVER_LABELS),
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[client.V1Container(
                        name="driver", image="trainer",
                        command=["python", "-c", f"import sys; sys.exit({code})"],
                    )],
                ),
            ),
        ),
    )


def _job_condition(batch, ns, name, kind) -> bool:
    conditions = batch.read_namespaced_job_status(name, ns).status.conditions or []
    return any(c.type == kind and c.status == "True" for c in conditions)


def _terminated(core, ns, selector):
    pods = core.list_namespaced_pod(ns, label_selector=selector).items
    if pods and pods[0].status.container_statuses:
        return pods[0].status.container_statuses[0].state.terminated and pods[0]
    return None


@pytest.mark.parametrize(("code", "phase", "job_condition"),
                         [(0, "Succeeded", "Complete"), (3, "Failed", "Failed")])
def test_driver_exit_code_becomes_pod_status(k8s_api, namespace, code, phase, job_condition):
    core, batch = client.CoreV1Api(k8s_api), client.BatchV1Api(k8s_api)
    batch.create_namespaced_job(namespace, driver_job("drv", code))
    pod = wait_for(lambda: _terminated(core, namespace, "job-name=drv"), 60,
                   what="the driver process to end")
    assert pod.status.phase == phase
    assert pod.status.container_statuses[0].state.terminated.exit_code == code
    wait_for(lambda: _job_condition(batch, namespace, "drv", job_condition), 60,
             what=f"Job {job_condition}")


POD_SCRIPT = textwrap.dedent("""
    import json, os, pathlib, signal, sys, time
    from kubernetes import client, config

    out = pathlib.Path("/out")
    settings = pathlib.Path("/etc/settings/greeting").read_text()
    try:
        pathlib.Path("/etc/settings/new").write_text("x")
        writable = True
    except OSError:
        writable = False
    config.load_incluster_config()
    review = client.AuthenticationV1Api().create_self_subject_review(
        client.V1SelfSubjectReview())
    (out / "report.json").write_text(json.dumps({
        "greeting": settings, "config_writable": writable,
        "user": review.status.user_info.username,
        "env": os.environ.get("GREETING"), "pod": os.environ.get("POD_NAME"),
    }))

    def on_term(signum, frame):
        (out / "terminated").write_text("checkpoint written")
        sys.exit(7)

    signal.signal(signal.SIGTERM, on_term)
    (out / "ready").write_text("")
    while True:
        time.sleep(0.1)
""")


def test_driver_pod_sees_its_mounts_token_and_gets_sigterm_on_delete(
    k8s_api, namespace, tmp_path
):
    core = client.CoreV1Api(k8s_api)
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="settings"), data={"greeting": "hello"}))
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="driver", labels=DRIVER_LABELS),
        spec=client.V1PodSpec(
            restart_policy="Never",
            termination_grace_period_seconds=20,
            containers=[client.V1Container(
                name="driver", image="trainer",
                command=["python", "-c", "$(SCRIPT)"],
                env=[
                    client.V1EnvVar(name="SCRIPT", value=POD_SCRIPT),
                    client.V1EnvVar(name="GREETING", value_from=client.V1EnvVarSource(
                        config_map_key_ref=client.V1ConfigMapKeySelector(
                            name="settings", key="greeting"))),
                    client.V1EnvVar(name="POD_NAME", value_from=client.V1EnvVarSource(
                        field_ref=client.V1ObjectFieldSelector(field_path="metadata.name"))),
                ],
                volume_mounts=[
                    client.V1VolumeMount(name="settings", mount_path="/etc/settings",
                                         read_only=True),
                    client.V1VolumeMount(name="out", mount_path="/out"),
                ],
            )],
            volumes=[
                client.V1Volume(name="settings", config_map=client.V1ConfigMapVolumeSource(
                    name="settings")),
                client.V1Volume(name="out", host_path=client.V1HostPathVolumeSource(
                    path=str(tmp_path))),
            ],
        ),
    )
    core.create_namespaced_pod(namespace, pod)
    wait_for(lambda: (tmp_path / "ready").exists(), 60, what="the driver process to start")

    report = json.loads((tmp_path / "report.json").read_text())
    assert report == {
        "greeting": "hello",
        "config_writable": False,
        "user": f"system:serviceaccount:{namespace}:default",
        "env": "hello",
        "pod": "driver",
    }
    running = core.read_namespaced_pod("driver", namespace)
    assert running.status.phase == "Running"
    assert running.status.container_statuses[0].ready is True

    core.delete_namespaced_pod("driver", namespace)
    wait_for(lambda: (tmp_path / "terminated").exists(), 30, what="the SIGTERM handler")
    assert (tmp_path / "terminated").read_text() == "checkpoint written"
    wait_for(lambda: not core.list_namespaced_pod(namespace).items, 30,
             what="the deleted pod to be removed")


def test_a_pod_waits_for_a_configmap_that_is_not_there_yet(k8s_api, namespace, tmp_path):
    """As a kubelet keeps such a pod in ContainerCreating and retries (the namespace's
    kube-root-ca.crt, a run's ConfigMaps made a moment after its Job)."""
    core = client.CoreV1Api(k8s_api)
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="early", labels=DRIVER_LABELS),
        spec=client.V1PodSpec(
            restart_policy="Never",
            containers=[client.V1Container(
                name="driver", image="trainer",
                command=["python", "-c", "import shutil; "
                         "shutil.copy('/etc/late/greeting', '/out/greeting')"],
                volume_mounts=[client.V1VolumeMount(name="late", mount_path="/etc/late"),
                               client.V1VolumeMount(name="out", mount_path="/out")],
            )],
            volumes=[
                client.V1Volume(name="late", config_map=client.V1ConfigMapVolumeSource(
                    name="late")),
                client.V1Volume(name="out", host_path=client.V1HostPathVolumeSource(
                    path=str(tmp_path))),
            ],
        ),
    ))

    def waiting():
        pod = core.read_namespaced_pod("early", namespace)
        statuses = pod.status.container_statuses or []
        return statuses and statuses[0].state.waiting and pod
    pod = wait_for(waiting, 60, what="the pod to wait for its ConfigMap")
    assert pod.status.phase == "Pending"
    assert "ConfigMap" in pod.status.container_statuses[0].state.waiting.message

    core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="late"), data={"greeting": "finally"}))
    done = wait_for(lambda: _terminated(core, namespace, ""), 60, what="the pod to run")
    assert done.status.phase == "Succeeded"
    assert (tmp_path / "greeting").read_text() == "finally"
