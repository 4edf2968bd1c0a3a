"""Acceptance as a pure function: what the installation lets a run reach (host directories,
the operator's Secret), a python reward's ConfigMap. The budget and the claims:
test_reconcile.py and the cluster tests in lifecycle/test_acceptance.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grpo_operator.acceptance import (
    Confinement,
    accept,
    check_budget,
    check_frozen_inputs_apart,
    check_host_paths,
    host_path_prefixes,
    reward_config_map,
    under,
)
from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.settings import from_env

SPEC = {
    "model": {"volume": {"hostPath": {"path": "/data/models/tiny"}}},
    "dataset": {"volume": {"persistentVolumeClaim": {"claimName": "sets"}},
                "trainFile": "t.parquet"},
    "reward": {"name": "gsm8k"},
    "algorithm": {"maxSteps": 3, "groupSize": 2, "promptsPerStep": 2, "maxResponseTokens": 8},
    "resources": {"image": "i", "workers": 1, "gpusPerWorker": 1},
    "checkpoint": {"volume": {"hostPath": {"path": "/data/checkpoints"}}},
}
PVCS = {"sets": {"spec": {"accessModes": ["ReadOnlyMany"]}}}
OPEN = Confinement(host_path_prefixes=("/data",))


def spec(**changes) -> GRPORunSpec:
    body = {**SPEC, **changes}
    return GRPORunSpec.model_validate(body)


def test_without_allowed_prefixes_no_host_path_is_accepted():
    refusal = accept(spec(), PVCS)
    assert refusal.reason == "HostPathNotAllowed"
    assert refusal.message.startswith("model.volume.hostPath (/data/models/tiny)")
    assert "GRPO_HOSTPATH_PREFIXES is empty" in refusal.message
    only_claims = spec(model={"volume": {"persistentVolumeClaim": {"claimName": "sets"}}},
                       checkpoint={"volume": {"persistentVolumeClaim": {"claimName": "ckpt"}}})
    pvcs = {**PVCS, "ckpt": {"spec": {"accessModes": ["ReadWriteMany"]}}}
    assert accept(only_claims, pvcs) is None


def test_host_paths_under_an_allowed_prefix_are_accepted():
    assert accept(spec(), PVCS, Confinement(host_path_prefixes=("/data",))) is None
    assert accept(spec(), PVCS, Confinement(host_path_prefixes=("/",))) is None
    assert accept(spec(), PVCS, Confinement(host_path_prefixes=("/srv", "/data/models",
                                                                "/data/checkpoints"))) is None


@pytest.mark.parametrize("prefixes", [("/dat",), ("/data/models",), ("/data/models/tiny/x",),
                                      ("/srv",)])
def test_host_paths_elsewhere_are_refused_naming_the_field(prefixes):
    refusal = check_host_paths(spec(), prefixes)
    assert refusal is not None and refusal.reason == "HostPathNotAllowed"
    field = ("checkpoint" if prefixes == ("/data/models",) else "model")
    assert refusal.message.startswith(f"{field}.volume.hostPath.path /data/")
    assert ", ".join(prefixes) in refusal.message


@pytest.mark.parametrize(("path", "prefix", "inside"), [
    ("/data", "/data", True), ("/data/x", "/data", True), ("/data/x/y", "/data/x", True),
    ("/data2", "/data", False), ("/data2/x", "/data", False), ("/dat", "/data", False),
    ("/etc", "/data", False), ("/data/../etc", "/data", False), ("/anything", "/", True),
    ("/tmp/pytest-of-u/pytest-12/x", "/tmp/pytest-of-u/pytest-1", False),
])
def test_under_compares_whole_components(path, prefix, inside):
    assert under(path, prefix) is inside


def test_prefixes_are_normalised_and_malformed_ones_name_the_setting():
    assert host_path_prefixes("") == ()
    assert host_path_prefixes(" /data/ , /srv//grpo,,/data") == ("/data", "/srv/grpo")
    for bad in ("data", "./data", "/data/../etc", "/data/./x", "~/grpo"):
        with pytest.raises(ValueError, match="GRPO_HOSTPATH_PREFIXES"):
            host_path_prefixes(bad)


def test_the_operators_signing_secret_cannot_be_referenced():
    confinement = Confinement(host_path_prefixes=("/data",), reserved_secrets=("signing",))
    env = [{"name": "A", "value": "1"},
           {"name": "K", "valueFrom": {"secretKeyRef": {"name": "signing", "key": "key"}}}]
    refusal = accept(spec(resources={**SPEC["resources"], "env": env}), PVCS, confinement)
    assert refusal.reason == "SecretNotAllowed"
    assert refusal.message.startswith("resources.env[1].valueFrom.secretKeyRef.name names "
                                      "Secret signing")
    pulled = spec(resources={**SPEC["resources"], "imagePullSecrets": [{"name": "signing"}]})
    assert accept(pulled, PVCS, confinement).message.startswith(
        "resources.imagePullSecrets[0].name")
    own = spec(resources={**SPEC["resources"], "imagePullSecrets": [{"name": "registry"}]})
    assert accept(own, PVCS, confinement) is None


def test_the_budget_is_judged_first():
    over = spec(budget={"maxGeneratedTokens": 1})
    assert accept(over, PVCS).reason == "BudgetTooSmall"


def test_evaluations_count_in_the_budget_when_evalmaxprompts_bounds_them():
    plan = 3 * 2 * 2 * 8  # maxSteps x promptsPerStep x groupSize x maxResponseTokens
    evaluating = {"dataset": {**SPEC["dataset"], "validationFile": "v.parquet"},
                  "budget": {"maxGeneratedTokens": plan + 5 * 8}}
    assert accept(spec(**evaluating), PVCS, OPEN) is None  # unknown size: the trainer's call
    bounded = spec(**evaluating, algorithm={**SPEC["algorithm"], "evalMaxPrompts": 5})
    assert accept(bounded, PVCS, OPEN) is None  # one evaluation, after the last step
    every_step = spec(**evaluating, algorithm={**SPEC["algorithm"], "evalMaxPrompts": 5,
                                               "evalIntervalSteps": 1})
    refusal = accept(every_step, PVCS, OPEN)
    assert refusal.reason == "BudgetTooSmall"
    assert "3 step(s) x 32 tokens + 3 evaluation(s) x 40 tokens = 216" in refusal.message


def test_settings_carry_the_prefixes_and_the_signing_secret():
    default = from_env({}).policy.confinement
    assert default.host_path_prefixes == ()
    assert default.reserved_secrets == ("grpo-operator-report-signing",)
    own = from_env({"GRPO_HOSTPATH_PREFIXES": "/data,/srv/grpo/",
                    "GRPO_SIGNING_SECRET": "signing"}).policy.confinement
    assert own == Confinement(host_path_prefixes=("/data", "/srv/grpo"),
                              reserved_secrets=("signing",))
    with pytest.raises(ValueError, match="GRPO_HOSTPATH_PREFIXES"):
        from_env({"GRPO_HOSTPATH_PREFIXES": "relative/dir"})


def _on(claim: str | None = None, host: str | None = None) -> dict:
    if claim:
        return {"persistentVolumeClaim": {"claimName": claim}}
    return {"hostPath": {"path": host}}


@pytest.mark.parametrize(("model", "dataset", "checkpoint", "overlaps"), [
    # hostPath: the node's filesystem is one volume; directories nest by whole components.
    ((_on(host="/data/models/tiny"), None), _on(claim="sets"), (_on(host="/data"), None),
     "model"),
    ((_on(host="/data/models/tiny"), None), _on(claim="sets"),
     (_on(host="/data/models/tiny/ckpt"), None), "model"),
    ((_on(host="/data/models"), "tiny"), _on(claim="sets"), (_on(host="/data/models/tiny"), None),
     "model"),
    ((_on(host="/data/models/tiny"), None), _on(claim="sets"), (_on(host="/data/models/t"), None),
     None),
    ((_on(host="/data/models/tiny"), None), _on(claim="sets"), (_on(host="/data/ckpt"), None),
     None),
    # One claim: the dataset is mounted whole, so any checkpoint directory on it is inside.
    ((_on(host="/data/m"), None), _on(claim="sets"), (_on(claim="sets"), "ckpt"), "dataset"),
    # The model is a directory of its claim; the checkpoints may sit beside it, not around it.
    ((_on(claim="shared"), "qwen"), _on(claim="sets"), (_on(claim="shared"), "runs"), None),
    ((_on(claim="shared"), "qwen"), _on(claim="sets"), (_on(claim="shared"), None), "model"),
    ((_on(claim="shared"), "qwen"), _on(claim="sets"), (_on(claim="shared"), "qwen/out"), "model"),
    # A claim and a node directory are different volumes, whatever the paths.
    ((_on(claim="shared"), None), _on(claim="sets"), (_on(host="/srv"), None), None),
])
def test_checkpoints_may_not_reach_the_frozen_inputs(model, dataset, checkpoint, overlaps):
    body = spec(model={"volume": model[0], **({"path": model[1]} if model[1] else {})},
                dataset={"volume": dataset, "trainFile": "t.parquet"},
                checkpoint={"volume": checkpoint[0],
                            **({"path": checkpoint[1]} if checkpoint[1] else {})})
    refusal = check_frozen_inputs_apart(body)
    if overlaps is None:
        assert refusal is None
    else:
        assert refusal.reason == "FrozenInputOverlap"
        assert f"overlaps {overlaps}.volume" in refusal.message, refusal.message


PYTHON_REWARD = {"name": "python", "python": {"configMap": "my-reward", "function": "dense"}}


def test_a_python_rewards_config_map_must_exist_and_hold_its_key():
    run = spec(reward=PYTHON_REWARD)
    refusal = accept(run, PVCS, OPEN)
    assert refusal.reason == "RewardNotFound"
    assert refusal.message == "ConfigMap my-reward (reward.python.configMap) does not exist"
    other_keys = {"my-reward": {"data": {"score.py": "x", "notes": "y"}}}
    refusal = accept(run, PVCS, OPEN, other_keys)
    assert refusal.reason == "RewardNotFound"
    assert refusal.message == ("ConfigMap my-reward (reward.python.configMap) has no key "
                               "reward.py (reward.python.key); its keys: notes, score.py")
    assert "its keys: none" in accept(run, PVCS, OPEN, {"my-reward": {}}).message
    assert accept(run, PVCS, OPEN, {"my-reward": {"data": {"reward.py": "x"}}}) is None
    # A key of its own, in data or binaryData (both are mounted alike).
    keyed = spec(reward={"name": "python", "python": {"configMap": "my-reward", "key": "s.py"}})
    assert accept(keyed, PVCS, OPEN, other_keys).message.endswith("its keys: notes, score.py")
    assert accept(keyed, PVCS, OPEN, {"my-reward": {"binaryData": {"s.py": "eA=="}}}) is None


def test_rewards_without_a_config_map_read_none():
    on_the_dataset = spec(reward={"name": "python", "python": {"path": "rewards/r.py"}})
    assert reward_config_map(on_the_dataset) is None
    assert accept(on_the_dataset, PVCS, OPEN) is None
    served = spec(reward={"name": "http", "http": {"url": "http://scorer.rl:8000/score"}})
    assert accept(served, PVCS, OPEN) is None
    assert reward_config_map(spec()) is None
    assert reward_config_map(spec(reward=PYTHON_REWARD)) == "my-reward"


@pytest.mark.parametrize("name", ["tiny-cpu.yaml", "gsm8k-gpu.yaml", "dapo-gpu.yaml"])
def test_every_examples_plan_fits_its_budget(name):
    """Counted as acceptance counts it: dynamic sampling's every round, the evaluations."""
    path = Path(__file__).resolve().parents[2] / "examples" / name
    assert check_budget(GRPORunSpec.model_validate(yaml.safe_load(path.read_text())["spec"])) \
        is None
