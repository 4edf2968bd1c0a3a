"""A driver pod that addresses a RayCluster's head Service reaches a real local Ray head,
authenticated with the cluster's token, whose jobs see the head pod's mounts."""

from __future__ import annotations

import textwrap

import pytest
from kubernetes import client

from grpo_operator.children.driver_job import ROLE_DRIVER, ROLE_LABEL
from tests.cluster.test_kuberay import raycluster
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

DRIVER = textwrap.dedent("""
    import os, pathlib, time
    from ray.job_submission import JobSubmissionClient, JobStatus
    client = JobSubmissionClient(os.environ["RAY_ADDRESS"])
    sid = client.submit_job(entrypoint="cat /data/greeting; touch /data/written || true")
    while client.get_job_status(sid) not in (JobStatus.SUCCEEDED, JobStatus.FAILED):
        time.sleep(0.5)
    pathlib.Path("/out/logs").write_text(client.get_job_logs(sid))
""")


def test_driver_reaches_a_local_head_with_the_cluster_token_and_mounts(
    cluster, k8s_api, namespace, tmp_path
):
    core = client.CoreV1Api(k8s_api)
    custom = client.CustomObjectsApi(k8s_api)
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    out.mkdir()
    (data / "greeting").write_text("hello from the head's /data\n")
    core.create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="rc-auth"), string_data={"auth_token": "s3cret-tok"}))
    rc = raycluster("rc", 0, 1)
    rc["spec"]["authOptions"] = {"mode": "token", "secretName": "rc-auth"}
    head = rc["spec"]["headGroupSpec"]["template"]["spec"]
    head["volumes"] = [{"name": "data", "hostPath": {"path": str(data)}}]
    head["containers"][0]["volumeMounts"] = [
        {"name": "data", "mountPath": "/data", "readOnly": True}]
    custom.create_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", rc)
    wait_for(lambda: any(c["type"] == "HeadPodReady" and c["status"] == "True" for c in
                         (custom.get_namespaced_custom_object(
                             "ray.io", "v1", namespace, "rayclusters", "rc"
                         ).get("status") or {}).get("conditions") or []),
             90, what="head ready")

    address = f"http://rc-head-svc.{namespace}.svc.cluster.local:8265"
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="driver", labels={ROLE_LABEL: ROLE_DRIVER}),
        spec=client.V1PodSpec(
            restart_policy="Never",
            containers=[client.V1Container(
                name="driver", image="trainer", command=["python", "-c", DRIVER],
                env=[client.V1EnvVar(name="RAY_ADDRESS", value=address),
                     client.V1EnvVar(name="RAY_AUTH_MODE", value="token"),
                     client.V1EnvVar(name="RAY_AUTH_TOKEN_PATH",
                                     value="/var/run/secrets/ray-auth/auth_token")],
                volume_mounts=[
                    client.V1VolumeMount(name="auth", mount_path="/var/run/secrets/ray-auth",
                                         read_only=True),
                    client.V1VolumeMount(name="out", mount_path="/out")],
            )],
            volumes=[
                client.V1Volume(name="auth", secret=client.V1SecretVolumeSource(
                    secret_name="rc-auth")),
                client.V1Volume(name="out", host_path=client.V1HostPathVolumeSource(
                    path=str(out)))],
        ),
    ))

    def finished():
        pod = core.read_namespaced_pod("driver", namespace)
        return pod.status.phase in ("Succeeded", "Failed") and pod

    pod = wait_for(finished, 120, what="the driver to finish")
    log = cluster.driver_runner.process_log(namespace, "driver")
    assert pod.status.phase == "Succeeded", log.read_text()[-3000:]
    logs = (out / "logs").read_text()
    assert "hello from the head's /data" in logs
    assert not (data / "written").exists(), "the head's /data mount must be read-only"
    assert len(cluster.ray_heads) == 1

    custom.delete_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", "rc")
    wait_for(lambda: len(cluster.ray_heads) == 0, 60, what="the local head to stop")
