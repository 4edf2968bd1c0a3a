"""Each pod of a RayCluster is its own Ray node: the head pod runs `ray start --head`, every
worker pod `ray start --address`, each with its own hostname, IP, /dev/shm and /tmp, its pod's
mounts and the resources KubeRay gave it. A driver pod reaches the head through the head
Service's name with the cluster's token; a deleted worker pod takes its node with it and the
pod KubeRay makes instead joins the same cluster."""

from __future__ import annotations

import json
import shlex
import textwrap
from pathlib import Path

import pytest
from kubernetes import client

from grpo_operator.api.constants import LABEL_ROLE, ROLE_DRIVER, ROLE_RAY_HEAD, ROLE_RAY_WORKER
from localcluster.ray_pods import node_resources, quantity, ray_start_command
from tests.cluster.test_kuberay import raycluster
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

# The job: one 1-CPU task per worker node; each writes a file into its own /dev/shm and /tmp
# and reports what it sees, and whether the other node's file is visible.
JOB = textwrap.dedent("""
    import json, os, socket, time, ray
    ray.init()
    @ray.remote(num_cpus=1)
    class Probe:
        def where(self):
            open("/dev/shm/mine", "w").write(socket.gethostname())
            open("/tmp/mine", "w").write(socket.gethostname())
            return {"host": socket.gethostname(), "node": ray.get_runtime_context().get_node_id(),
                    "ip": ray.util.get_node_ip_address()}
        def sees(self):
            return {"shm": open("/dev/shm/mine").read(), "tmp": open("/tmp/mine").read(),
                    "data": os.path.exists("/data/greeting")}
    probes = [Probe.options(scheduling_strategy="SPREAD").remote() for _ in range(2)]
    where = ray.get([p.where.remote() for p in probes])
    sees = ray.get([p.sees.remote() for p in probes])
    nodes = [{"ip": n["NodeManagerAddress"], "cpus": n["Resources"].get("CPU", 0),
              "head": "node:__internal_head__" in n["Resources"]}
             for n in ray.nodes() if n["Alive"]]
    print("RESULT " + json.dumps({"where": where, "sees": sees, "nodes": nodes,
                                  "head_data": open("/data/greeting").read()}))
""")

DRIVER = textwrap.dedent("""
    import os, pathlib, shlex, time
    from ray.job_submission import JobSubmissionClient, JobStatus
    client = JobSubmissionClient(os.environ["RAY_ADDRESS"])
    sid = client.submit_job(entrypoint="python -c " + shlex.quote(os.environ["JOB"]))
    while client.get_job_status(sid) not in (JobStatus.SUCCEEDED, JobStatus.FAILED):
        time.sleep(0.5)
    pathlib.Path("/out/logs").write_text(client.get_job_logs(sid))
""")


def _labelled_cluster(data) -> dict:
    rc = raycluster("rc", 0, 2)
    spec = rc["spec"]
    spec["authOptions"] = {"mode": "token", "secretName": "rc-auth"}
    spec["headGroupSpec"]["rayStartParams"] = {"num-cpus": "0"}
    head = spec["headGroupSpec"]["template"]
    head["metadata"] = {"labels": {LABEL_ROLE: ROLE_RAY_HEAD}}
    head["spec"]["volumes"] = [{"name": "data", "hostPath": {"path": str(data)}}]
    head["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "data", "mountPath": "/data", "readOnly": True}]
    worker = spec["workerGroupSpecs"][0]["template"]
    worker["metadata"] = {"labels": {LABEL_ROLE: ROLE_RAY_WORKER}}
    worker["spec"]["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory",
                                                               "sizeLimit": "300Mi"}}]
    worker["spec"]["containers"][0]["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    return rc


def _start_cluster(k8s_api, namespace, data, token: str) -> list:
    """The labelled RayCluster with its auth Secret; returns its three pods once Ready."""
    core = client.CoreV1Api(k8s_api)
    core.create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="rc-auth"), string_data={"auth_token": token}))
    client.CustomObjectsApi(k8s_api).create_namespaced_custom_object(
        "ray.io", "v1", namespace, "rayclusters", _labelled_cluster(data))
    return wait_for(lambda: len(_ready_pods(core, namespace)) == 3 and _ready_pods(
        core, namespace), 180, what="the head and two worker pods Ready")


def _ready_pods(core, namespace) -> list:
    pods = core.list_namespaced_pod(namespace, label_selector="ray.io/cluster=rc").items
    return [p for p in pods if p.metadata.deletion_timestamp is None and any(
        c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]


def test_every_ray_pod_is_its_own_node_and_a_driver_reaches_the_head(
    cluster, k8s_api, namespace, tmp_path
):
    core = client.CoreV1Api(k8s_api)
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    out.mkdir()
    (data / "greeting").write_text("hello from the head's /data\n")
    pods = _start_cluster(k8s_api, namespace, data, "s3cret-tok")
    ips = {p.metadata.name: p.status.pod_ip for p in pods}
    assert len(set(ips.values())) == 3, ips
    assert len(cluster.ray_pods.nodes(namespace, "rc")) == 3

    address = f"http://rc-head-svc.{namespace}.svc.cluster.local:8265"
    core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name="driver", labels={LABEL_ROLE: ROLE_DRIVER}),
        spec=client.V1PodSpec(
            restart_policy="Never",
            containers=[client.V1Container(
                name="driver", image="trainer", command=["python", "-c", DRIVER],
                env=[client.V1EnvVar(name="RAY_ADDRESS", value=address),
                     client.V1EnvVar(name="RAY_AUTH_MODE", value="token"),
                     client.V1EnvVar(name="RAY_AUTH_TOKEN_PATH",
                                     value="/var/run/secrets/ray-auth/auth_token"),
                     client.V1EnvVar(name="JOB", value=JOB)],
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

    pod = wait_for(finished, 180, what="the driver to finish")
    log = cluster.driver_runner.process_log(namespace, "driver")
    assert pod.status.phase == "Succeeded", log.read_text()[-3000:]
    logs = (out / "logs").read_text()
    line = next((x for x in logs.splitlines() if x.startswith("RESULT ")), None)
    assert line, logs[-3000:]
    result = json.loads(line[len("RESULT "):])

    # Two workers with KubeRay's CPUs (the container's limit), a head with none.
    assert sorted((n["head"], n["cpus"]) for n in result["nodes"]) == [
        (False, 1.0), (False, 1.0), (True, 0.0)]
    where, sees = result["where"], result["sees"]
    workers = {n for n, p in ips.items() if "worker" in n}
    assert {w["host"] for w in where} == workers  # one task per worker pod, named as the pod
    assert {w["ip"] for w in where} == {ips[n] for n in workers}
    assert len({w["node"] for w in where}) == 2
    # Each node's /dev/shm and /tmp are its own: a file one wrote is not the other's.
    for w, s in zip(where, sees, strict=True):
        assert s["shm"] == w["host"] and s["tmp"] == w["host"]
        assert not s["data"]  # /data is the head pod's volume, not the workers'
    assert result["head_data"] == "hello from the head's /data\n"


def test_a_deleted_worker_pod_takes_its_node_and_its_replacement_joins(
    cluster, k8s_api, namespace, tmp_path
):
    core = client.CoreV1Api(k8s_api)
    custom = client.CustomObjectsApi(k8s_api)
    pods = _start_cluster(k8s_api, namespace, tmp_path, "t0k")
    victim = next(p for p in pods if "worker" in p.metadata.name)
    old_node = cluster.ray_pods.nodes(namespace, "rc")[victim.metadata.name]
    core.delete_namespaced_pod(victim.metadata.name, namespace)
    wait_for(lambda: old_node.exited() is not None, 60, what="the worker's Ray node to stop")

    def replaced():
        ready = _ready_pods(core, namespace)
        names = {p.metadata.name for p in ready}
        return len(ready) == 3 and victim.metadata.name not in names and names
    names = wait_for(replaced, 180, what="KubeRay's replacement worker to join")
    nodes = cluster.ray_pods.nodes(namespace, "rc")
    assert set(nodes) == names
    head = next(n for n in nodes.values() if n.is_head)
    assert all(n.gcs_address == head.gcs_address for n in nodes.values())

    custom.delete_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", "rc")
    wait_for(lambda: not cluster.ray_pods.nodes(namespace, "rc"), 90,
             what="every node of the cluster to stop")
    assert all(n.exited() is not None for n in nodes.values())


def test_node_resources_follow_kuberays_ray_start_and_the_pods_limits():
    container = {"resources": {"limits": {"cpu": "2", "memory": "4Gi"}},
                 "command": ["/bin/bash", "-c", "--"],
                 "args": ["ulimit -n 65536; ray start --address=x:6379 --block "
                          "--memory=4294967296 --num-cpus=2 --num-gpus=1 "
                          "--resources='{\"rdma\": 1}'"]}
    args = ray_start_command(container, {})
    resources, shm = node_resources(container, args, [
        {"name": "dshm", "emptyDir": {"medium": "Memory"}}])
    assert (resources.num_cpus, resources.num_gpus, resources.custom) == (2, 1, {"rdma": 1})
    assert resources.memory_bytes == 4 * 2**30
    assert shm == 4 * 2**30  # a memory emptyDir without a sizeLimit: the memory limit
    assert resources.object_store_bytes == int(4 * 2**30 * 0.3)
    _, small = node_resources(container, args, [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Mi"}}])
    assert small == 256 * 2**20
    assert quantity("500m") == 0.5


def test_a_sandboxed_node_sees_its_image_paths_under_tmp_and_nothing_else_of_the_hosts_tmp(
        tmp_path):
    """A checkout or virtualenv under /tmp (a CI clone) stays visible in a pod's private /tmp;
    the rest of the host's /tmp does not."""
    import subprocess

    from localcluster import mountns

    image, other = tmp_path / "image", tmp_path / "other"
    image.mkdir()
    other.mkdir()
    (image / "module.py").write_text("seen\n")
    (other / "secret").write_text("hidden")
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1\tlocalhost\n")
    private = tmp_path / "private-tmp"
    private.mkdir()
    sandbox = mountns.Sandbox(hostname="pod-a", hosts_file=hosts, shm_bytes=2**20)
    script = (f"cat {image}/module.py; test ! -e {other}/secret && echo gone; hostname; "
              "df --output=size -B1 /dev/shm | tail -1")
    out = subprocess.run(mountns.wrap(["sh", "-c", script], [], sandbox=sandbox,
                                      private_tmp=private, image_paths=(image,)),
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["seen", "gone", "pod-a", str(2**20)]


def test_a_read_only_root_takes_writes_only_in_the_mounts_tmp_and_dev_shm(tmp_path):
    """readOnlyRootFilesystem as a container runtime applies it: the root filesystem refuses
    writes in the pod's namespace (and only there), its volumes, /tmp and /dev/shm take them."""
    import subprocess

    from localcluster import mountns
    from localcluster.podspec import Mount

    volume, private, hosts = tmp_path / "volume", tmp_path / "private-tmp", tmp_path / "hosts"
    volume.mkdir()
    private.mkdir()
    hosts.write_text("127.0.0.1\tlocalhost\n")
    target = tmp_path / "volume-target"  # where the pod sees the volume (not under /tmp
    target.mkdir()                       # in real pods; fine without a sandbox here)
    home = Path.home() / f".grpo-ro-probe-{tmp_path.name}"
    script = (f"touch {home} 2>/dev/null && echo root-writable || echo root-refused; "
              f"touch /tmp/x && echo tmp-ok; touch /dev/shm/x && echo shm-ok; "
              f"touch {mountns.INDUCTOR_CACHE}/probe && echo cache-ok")
    sandbox = mountns.Sandbox(hostname="pod-ro", hosts_file=hosts, shm_bytes=2**20,
                              read_only_root=True)
    out = subprocess.run(mountns.wrap(["sh", "-c", script], [], sandbox=sandbox,
                                      private_tmp=private, read_only_root=True),
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["root-refused", "tmp-ok", "shm-ok", "cache-ok"], out
    assert (private / "x").exists() and not home.exists()
    # Without a sandbox (a driver pod): a volume at its mountPath takes writes, the root not.
    out = subprocess.run(mountns.wrap(
        ["sh", "-c", f"touch {target}/y && echo volume-ok; touch {home} 2>/dev/null || echo "
                     "root-refused"],
        [Mount(volume, str(target), read_only=False)], read_only_root=True),
        capture_output=True, text=True, check=True).stdout.split()
    assert out == ["volume-ok", "root-refused"], out
    assert (volume / "y").exists()
    home.touch()  # the host's root stays writable
    home.unlink()


# A trainer in miniature: its state lives in an actor on the worker, and on SIGTERM it asks
# that actor for a checkpoint that takes a few seconds.
STATEFUL_JOB = textwrap.dedent("""
    import signal, socket, sys, time, ray
    ray.init()
    @ray.remote(num_cpus=1)
    class Learner:
        def where(self):
            return socket.gethostname()
        def save(self):
            time.sleep(3)
            return socket.gethostname()
    learner = Learner.remote()
    ray.get(learner.where.remote())
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    open("/out/started", "w").close()
    while not stop:
        time.sleep(0.1)
    try:
        result = "saved on " + ray.get(learner.save.remote(), timeout=30)
    except Exception as e:
        result = "lost: " + type(e).__name__
    open("/out/checkpoint", "w").write(result)
    sys.exit(13)
""")


def test_deleted_ray_pods_run_the_drain_hook_so_the_job_checkpoints_before_they_go(
    cluster, k8s_api, namespace, tmp_path
):
    """What a Kueue preemption does to a run's cluster (KubeRay deletes every pod at once),
    with the operator's preStop hook: the head's hook stops the job, and the worker's keeps
    its pod up until the job, which needs the worker's actor to checkpoint, has ended."""
    from ray.job_submission import JobSubmissionClient

    from grpo_operator.children.raycluster import DRAIN_HOOK

    core = client.CoreV1Api(k8s_api)
    out = tmp_path / "out"
    out.mkdir()
    rc = raycluster("rc", 0, 1)
    spec = rc["spec"]
    spec["authOptions"] = {"mode": "token", "secretName": "rc-auth"}
    spec["headGroupSpec"]["rayStartParams"] = {"num-cpus": "0"}
    for group, role in ((spec["headGroupSpec"], ROLE_RAY_HEAD),
                        (spec["workerGroupSpecs"][0], ROLE_RAY_WORKER)):
        template = group["template"]
        template["metadata"] = {"labels": {LABEL_ROLE: role}}
        template["spec"]["terminationGracePeriodSeconds"] = 30
        container = template["spec"]["containers"][0]
        container["lifecycle"] = DRAIN_HOOK
        container["env"] = [{"name": "RAY_JOB_STOP_WAIT_TIME_S", "value": "30"}]
    head = spec["headGroupSpec"]["template"]["spec"]
    head["volumes"] = [{"name": "out", "hostPath": {"path": str(out)}}]
    head["containers"][0]["volumeMounts"] = [{"name": "out", "mountPath": "/out"}]
    core.create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="rc-auth"), string_data={"auth_token": "dr4in"}))
    created = client.CustomObjectsApi(k8s_api).create_namespaced_custom_object(
        "ray.io", "v1", namespace, "rayclusters", rc)
    wait_for(lambda: len(_ready_pods(core, namespace)) == 2, 180, what="head and worker Ready")
    node = cluster.ray_pods.head(namespace, created["metadata"]["uid"])
    jobs = JobSubmissionClient(node.address, headers={"Authorization": "Bearer dr4in"})
    jobs.submit_job(entrypoint="python -c " + shlex.quote(STATEFUL_JOB))
    wait_for(lambda: (out / "started").exists(), 120, what="the job's actor on the worker")

    client.CustomObjectsApi(k8s_api).delete_namespaced_custom_object(
        "ray.io", "v1", namespace, "rayclusters", "rc")
    wait_for(lambda: not cluster.ray_pods.nodes(namespace, "rc"), 90,
             what="every node of the cluster to stop")
    # The worker's actor answered 3 s after the stop: its pod waited for the job to end.
    result = (out / "checkpoint").read_text()
    assert result.startswith("saved on rc-gpu-worker-"), result
