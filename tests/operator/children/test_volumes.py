"""A python reward's ConfigMap in the pods as the builders make them (pure, no cluster): only
its key, read-only at /reward in the head and the workers, where the run config says the
file is; nothing of it in the driver, nor in any pod of a run with another reward."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grpo_operator.api.inputs import REWARD_MOUNT
from grpo_operator.api.run_config import standard_paths
from grpo_operator.api.spec import GRPORunSpec, validate_manifest
from grpo_operator.children.driver_job import driver_job
from grpo_operator.children.meta import RunRef
from grpo_operator.children.raycluster import ray_cluster

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "tiny-cpu.yaml"
RUN = RunRef("tiny-cpu", "default", "uid-1")


def _spec(reward: dict) -> GRPORunSpec:
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["spec"]["reward"] = reward
    return validate_manifest(manifest).spec


def _pods(spec: GRPORunSpec) -> dict[str, dict]:
    rc = ray_cluster(spec, RUN)["spec"]
    (workers,) = rc["workerGroupSpecs"]
    return {"head": rc["headGroupSpec"]["template"]["spec"],
            "worker": workers["template"]["spec"],
            "driver": driver_job(spec, RUN, attempt=1)["spec"]["template"]["spec"]}


def _reward_parts(pod: dict) -> tuple[list[dict], list[dict]]:
    volumes = [v for v in pod["volumes"] if "configMap" in v and v["name"] == "reward"]
    names = {v["name"] for v in volumes}
    mounts = [m for m in pod["containers"][0]["volumeMounts"]
              if m["name"] in names or m["mountPath"] == REWARD_MOUNT]
    return volumes, mounts


@pytest.mark.parametrize("key", [None, "rewards.py"])
def test_a_config_map_reward_is_mounted_read_only_in_the_ray_pods_only(key):
    python = {"configMap": "my-reward", "function": "dense", **({"key": key} if key else {})}
    spec = _spec({"name": "python", "python": python})
    wanted = key or "reward.py"
    for role, pod in _pods(spec).items():
        volumes, mounts = _reward_parts(pod)
        if role == "driver":  # it submits and follows the trainer; it scores nothing
            assert (volumes, mounts) == ([], []), role
            continue
        # Only the key: a ConfigMap holding other keys exposes nothing else.
        assert volumes == [{"name": "reward", "configMap": {
            "name": "my-reward", "items": [{"key": wanted, "path": wanted}]}}], role
        assert mounts == [{"name": "reward", "mountPath": REWARD_MOUNT, "readOnly": True}], role
    # The file the trainer is told to load is the one the mount puts there.
    assert standard_paths(spec, RUN.uid).reward_file == f"{REWARD_MOUNT}/{wanted}"


@pytest.mark.parametrize("reward", [
    {"name": "regex", "pattern": "(?P<answer>[a-z])[^a-z]*$"},
    {"name": "python", "python": {"path": "rewards/dense.py"}},  # on the dataset volume
    {"name": "http", "http": {"url": "http://scorer.rl.svc:8000/score"}},
], ids=lambda r: r["name"] + ("-path" if "python" in r else ""))
def test_other_rewards_mount_nothing_at_reward(reward):
    spec = _spec(reward)
    for role, pod in _pods(spec).items():
        assert _reward_parts(pod) == ([], []), role
        assert not [v for v in pod["volumes"] if "configMap" in v
                    and v["configMap"]["name"] != f"{RUN.name}-run-config"], role
