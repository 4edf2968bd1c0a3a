"""The children of the GPU example, as the API server stores them: what reaches the cluster
is what a GPU cluster needs (read-only inputs, GPUs, node pool, /dev/shm, hardening), owned by
the run, and carrying none of the run's own labels."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client, dynamic

from grpo_operator.api.constants import (
    API_VERSION,
    GROUP,
    KIND,
    LABEL_ROLE,
    PLURAL,
    ROLE_DRIVER,
    VERSION,
)
from grpo_operator.api.run_config import ResumeMode, RunConfig
from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.children import configmaps, identity
from grpo_operator.children.driver_job import driver_job
from grpo_operator.children.meta import RunRef
from grpo_operator.children.raycluster import ray_cluster
from grpo_operator.naming import ChildNames

pytestmark = pytest.mark.cluster

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "gsm8k-gpu.yaml"
PARENT_LABELS = {"argocd.argoproj.io/instance": "team-a", "team": "rl"}


@pytest.fixture(scope="module")
def stored(cluster, k8s_api, grporun_crd):
    """Creates the GPU example (with labels of its own) and all its children; returns them as
    read back from the API server."""
    namespace = f"children-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(k8s_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["metadata"]["labels"] = PARENT_LABELS
    manifest["metadata"]["annotations"] = {"argocd.argoproj.io/tracking-id": "x"}
    run_obj = client.CustomObjectsApi(k8s_api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, manifest
    )
    spec = GRPORunSpec.model_validate(run_obj["spec"])
    run = RunRef(run_obj["metadata"]["name"], namespace, run_obj["metadata"]["uid"])
    config = RunConfig.build(
        spec=spec, name=run.name, namespace=namespace, uid=run.uid, attempt=1,
        resume=ResumeMode.NONE, report_config_map=ChildNames(run.name).report_config_map,
    )
    objects = [
        identity.service_account(run), identity.role(run), identity.role_binding(run),
        identity.auth_secret(run, "token"), configmaps.run_config_map(run, config),
        configmaps.report_config_map(run), ray_cluster(spec, run), driver_job(spec, run, 1),
    ]
    dyn = dynamic.DynamicClient(k8s_api)
    result = {}
    for obj in objects:
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        created = resource.create(body=obj, namespace=namespace, field_validation="Strict")
        result[obj["kind"]] = created.to_dict()
    return run, result


def test_children_are_owned_by_the_run_and_carry_only_our_labels(stored):
    run, children = stored
    for kind, obj in children.items():
        meta = obj["metadata"]
        (owner,) = meta["ownerReferences"]
        assert (owner["apiVersion"], owner["kind"], owner["uid"], owner["controller"]) == (
            API_VERSION, KIND, run.uid, True
        ), kind
        for key in PARENT_LABELS:
            assert key not in (meta.get("labels") or {}), kind
        assert not any(k.startswith("argocd") for k in meta.get("annotations") or {}), kind
        assert meta["labels"]["grpo.dev/run"] == run.name


def _pod_specs(children):
    rc = children["RayCluster"]["spec"]
    yield "head", rc["headGroupSpec"]["template"]["spec"]
    for group in rc["workerGroupSpecs"]:
        yield "worker", group["template"]["spec"]
    yield "driver", children["Job"]["spec"]["template"]["spec"]


def test_inputs_are_read_only_on_the_ray_pods_absent_from_the_driver(stored):
    _, children = stored
    for role, pod in _pod_specs(children):
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
        assert mounts["/etc/grpo"]["readOnly"] is True, role
        if role == "driver":  # it submits and follows the trainer; it reads no input
            assert not {"/model", "/data", "/checkpoints"} & set(mounts), mounts
            assert not {"model", "data", "checkpoints"} & set(volumes), volumes
            continue
        assert mounts["/model"]["readOnly"] is True, role
        assert mounts["/model"]["subPath"] == "Qwen2.5-1.5B-Instruct", role
        assert mounts["/data"]["readOnly"] is True, role
        assert volumes["model"]["persistentVolumeClaim"] == {"claimName": "models",
                                                             "readOnly": True}
        assert not mounts["/checkpoints"].get("readOnly"), role
        assert volumes["dshm"]["emptyDir"] == {"medium": "Memory"}, role
        assert mounts["/dev/shm"]["name"] == "dshm", role


def test_gpu_workers_land_on_the_gpu_pool_and_pods_are_hardened(stored):
    _, children = stored
    rc = children["RayCluster"]["spec"]
    (workers,) = rc["workerGroupSpecs"]
    assert workers["replicas"] == 2
    container = workers["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "8"
    assert workers["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"
    }
    assert "nodeSelector" not in rc["headGroupSpec"]["template"]["spec"]
    assert rc["authOptions"] == {"mode": "token", "secretName": "gsm8k-qwen25-1-5b-ray-auth"}
    assert children["RayCluster"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == (
        "team-a-gpu"
    )
    head_env = {e["name"]: e.get("value") for e in
                rc["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]}
    assert head_env["RAY_JOB_STOP_WAIT_TIME_S"] == "300"
    for role, pod in _pod_specs(children):
        assert pod["securityContext"]["runAsNonRoot"] is True, role
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, role
        sc = pod["containers"][0]["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False, role
        assert sc["capabilities"] == {"drop": ["ALL"]}, role
        assert pod["automountServiceAccountToken"] is (role == "driver"), role
        # A read-only root: writes go to the volumes, the home among them an emptyDir's /tmp.
        assert sc["readOnlyRootFilesystem"] is True, role
        container = pod["containers"][0]
        (tmp,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes[tmp["name"]]["emptyDir"] == {}, role
        assert {"name": "HOME", "value": "/tmp"} in container["env"], role


def test_driver_job_fails_fast_on_non_retryable_codes(stored):
    run, children = stored
    job = children["Job"]
    assert job["metadata"]["name"] == f"{run.name}-a1"
    assert job["spec"]["backoffLimit"] == 0
    codes, disrupted = job["spec"]["podFailurePolicy"]["rules"]
    assert codes["action"] == "FailJob"
    assert codes["onExitCodes"]["values"] == [10, 11, 12, 15, 18]
    assert disrupted == {"action": "FailJob", "onPodConditions": [
        {"type": "DisruptionTarget", "status": "True"}]}
    pod = job["spec"]["template"]
    assert pod["metadata"]["labels"][LABEL_ROLE] == ROLE_DRIVER
    assert pod["spec"]["serviceAccountName"] == f"{run.name}-trainer"
    assert pod["spec"]["terminationGracePeriodSeconds"] == 330


def test_report_role_names_only_its_own_config_map(stored):
    run, children = stored
    (rule,) = children["Role"]["rules"]
    assert rule["resourceNames"] == [f"{run.name}-report"]
    assert set(rule["verbs"]) == {"get", "patch"}
