"""Small GRPORun manifests for the operator's cluster tests, and ways to look at a run."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from grpo_operator.api.constants import GROUP, PLURAL, VERSION
from grpo_trainer import toy
from tests.waiting import wait_for

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "tiny-cpu.yaml"

GPU_POOL = {
    "nodeSelector": {"grpo.dev/node-pool": "gpu"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
}


def manifest(name: str, data_dir: str, **spec_overrides: Any) -> dict[str, Any]:
    """A run on hostPath volumes under ``data_dir`` with one 1-GPU worker on the GPU pool."""
    spec: dict[str, Any] = {
        "model": {"volume": {"hostPath": {"path": f"{data_dir}/model"}}},
        "dataset": {"volume": {"hostPath": {"path": f"{data_dir}/data"}},
                    "trainFile": "train.parquet"},
        "reward": {"name": "gsm8k"},
        "algorithm": {"maxSteps": 2, "groupSize": 2, "promptsPerStep": 2,
                      "maxPromptTokens": 32, "maxResponseTokens": 8},
        "resources": {"image": "grpo-trainer:dev", "workers": 1, "gpusPerWorker": 1,
                      "worker": {"cpu": "1", "memory": "1Gi"},
                      "head": {"cpu": "1", "memory": "1Gi"}, **GPU_POOL},
        "checkpoint": {"volume": {"hostPath": {"path": f"{data_dir}/checkpoints"}}},
    }
    for path, value in spec_overrides.items():
        target = spec
        keys = path.split("__")
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = copy.deepcopy(value)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GRPORun",
            "metadata": {"name": name}, "spec": spec}


def run_failure(cluster, namespace: str, status: dict, job: str) -> str:
    """For the assertion on a run that should have succeeded: its status and its driver Job's
    log as far as it says why — every line that names an error or a warning (a retryable
    failure's cause may be far from the log's end), then the end. One string: pytest prints a
    string message whole, but cuts the repr of any other object to one line."""
    report = f"status: {json.dumps(status, indent=1, default=str)}\n"
    log = cluster.driver_runner.job_log(namespace, job)
    if log is None:
        return report + f"driver Job {job}: no log"
    text = log.read_text()
    said = [line for line in text.splitlines()
            if any(word in line for word in ("Error", "ERROR", "WARNING", "Traceback", "failed"))]
    return report + f"driver Job {job}'s log:\n" + "\n".join(said[:60]) + "\n...\n" + text[-4000:]


def tiny_example(tmp_path: Path, tie_word_embeddings: bool = False) -> dict:
    """examples/tiny-cpu.yaml with its hostPaths pointed at a fresh tiny model and dataset."""
    toy.make_tiny_model(tmp_path / "model", tie_word_embeddings=tie_word_embeddings)
    toy.make_letters_dataset(tmp_path / "data")
    body = yaml.safe_load(EXAMPLE.read_text())
    spec = body["spec"]
    spec["model"]["volume"]["hostPath"]["path"] = str(tmp_path / "model")
    spec["dataset"]["volume"]["hostPath"]["path"] = str(tmp_path / "data")
    spec["checkpoint"]["volume"]["hostPath"]["path"] = str(tmp_path / "checkpoints")
    return body


class Runs:
    def __init__(self, api: client.ApiClient, namespace: str,
                 judge: Callable[[dict], tuple[str, str]] | None = None):
        self.api = api
        self.judge = judge
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.namespace = namespace

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace,
                                                           PLURAL, body)

    def get(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace,
                                                        PLURAL, name)

    def patch(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch the run (spec, annotations), as `kubectl patch --type merge` does."""
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace,
                                                          PLURAL, name, body)

    def ray_cluster(self, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object("ray.io", "v1", self.namespace,
                                                            "rayclusters", name)
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise

    def ledger(self, name: str) -> dict[str, Any]:
        return self.status(name).get("ledger") or {}

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

    def status(self, name: str) -> dict[str, Any]:
        return self.get(name).get("status") or {}

    def condition(self, name: str, kind: str) -> dict[str, Any] | None:
        return next((c for c in self.status(name).get("conditions") or []
                     if c["type"] == kind), None)

    def kstatus(self, name: str) -> tuple[str, str]:
        """(status, message) kstatus computes for the run as it is now (the ``kstatus``
        fixture)."""
        assert self.judge is not None, "these Runs were made without the kstatus fixture"
        return self.judge(self.get(name))

    def phase(self, name: str) -> str | None:
        return self.status(name).get("phase")

    def in_attempt(self, name: str, attempt: int, *phases: str) -> dict[str, Any] | None:
        """The run's status if it is in one of ``phases`` during ``attempt``, else None. One
        read: two could see the phase of one attempt and the number of the next."""
        status = self.status(name)
        if status.get("phase") in phases and (
                (status.get("recovery") or {}).get("attempt") == attempt):
            return status
        return None

    def children(self, name: str) -> dict[str, list[str]]:
        """Every object labelled as this run's child, by kind (empty lists dropped)."""
        selector = f"grpo.dev/run={name}"
        ns, core = self.namespace, self.core
        found = {
            "ServiceAccount": core.list_namespaced_service_account(ns, label_selector=selector),
            "ConfigMap": self.core.list_namespaced_config_map(ns, label_selector=selector),
            "Secret": self.core.list_namespaced_secret(ns, label_selector=selector),
            "Job": client.BatchV1Api(self.api).list_namespaced_job(ns, label_selector=selector),
            "Role": client.RbacAuthorizationV1Api(self.api).list_namespaced_role(
                ns, label_selector=selector),
            "RoleBinding": client.RbacAuthorizationV1Api(self.api).list_namespaced_role_binding(
                ns, label_selector=selector),
        }
        result = {kind: [o.metadata.name for o in lst.items] for kind, lst in found.items()}
        rcs = self.custom.list_namespaced_custom_object("ray.io", "v1", ns, "rayclusters",
                                                        label_selector=selector)
        result["RayCluster"] = [o["metadata"]["name"] for o in rcs["items"]]
        return {kind: names for kind, names in result.items() if names}

    def running_driver_pod(self, name: str, attempt: int = 1):
        """The driver pod of ``attempt`` once it is Running, else None."""
        pods = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"job-name={name}-a{attempt}").items
        return pods[0] if pods and pods[0].status.phase == "Running" else None

    def events(self, name: str) -> list[tuple[str, str, str]]:
        evs = self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={name}")
        return [(e.type, e.reason, e.message) for e in evs.items]

    def posted(self, name: str, match: Callable[[tuple[str, str, str]], bool], what: str,
               timeout: float = 30) -> list[tuple[str, str, str]]:
        """The run's Events ``match`` accepts, once there is one. The operator posts a pass's
        Events off the pass, after the status it wrote: a test that has seen the status may
        look before they are there."""
        try:
            return wait_for(lambda: [e for e in self.events(name) if match(e)], timeout,
                            what=what)
        except AssertionError as e:
            raise AssertionError(f"{e}; the run's Events: {self.events(name)}") from None
