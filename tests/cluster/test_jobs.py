"""Jobs run to completion on KWOK nodes and are garbage-collected with their owner."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


def job(name: str, owner: client.V1ConfigMap | None = None) -> client.V1Job:
    refs = None
    if owner is not None:
        refs = [client.V1OwnerReference(api_version="v1", kind="ConfigMap",
                                        name=owner.metadata.name, uid=owner.metadata.uid)]
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name, owner_references=refs),
        spec=client.V1JobSpec(
            backoff_limit=0,
            template=client.V1PodTemplateSpec(
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[client.V1Container(name="main", image="busybox",
                                                   command=["true"])],
                )
            ),
        ),
    )


def _complete(batch: client.BatchV1Api, ns: str, name: str) -> bool:
    conditions = batch.read_namespaced_job_status(name, ns).status.conditions or []
    return any(c.type == "Complete" and c.status == "True" for c in conditions)


def test_job_completes_and_is_collected_with_its_owner(k8s_api, namespace):
    core, batch = client.CoreV1Api(k8s_api), client.BatchV1Api(k8s_api)
    owner = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"))
    )
    batch.create_namespaced_job(namespace, job("owned", owner))
    wait_for(lambda: _complete(batch, namespace, "owned"), 60, what="the Job to complete")

    core.delete_namespaced_config_map("owner", namespace)
    wait_for(lambda: not batch.list_namespaced_job(namespace).items, 60,
             what="the garbage collector to delete the Job")
    wait_for(lambda: not core.list_namespaced_pod(namespace).items, 60,
             what="the Job's pods to go too")


def test_background_deletion_takes_the_pods(k8s_api, namespace):
    core, batch = client.CoreV1Api(k8s_api), client.BatchV1Api(k8s_api)
    batch.create_namespaced_job(namespace, job("solo"))
    wait_for(lambda: _complete(batch, namespace, "solo"), 60, what="the Job to complete")
    assert core.list_namespaced_pod(namespace, label_selector="job-name=solo").items

    batch.delete_namespaced_job("solo", namespace, propagation_policy="Background")
    wait_for(lambda: not core.list_namespaced_pod(namespace).items, 60,
             what="the Job's pods to be deleted")
