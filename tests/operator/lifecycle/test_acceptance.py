"""Acceptance refuses what cannot work, before anything is created or spent."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.operator.conftest import OperatorProcess, running_session_operator
from tests.operator.lifecycle.runs import manifest
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


def _refused(runs, name: str, reason: str) -> dict:
    wait_for(lambda: runs.phase(name) == "Failed", 30, what=f"{name} to be refused")
    accepted = runs.condition(name, "Accepted")
    assert accepted["status"] == "False"
    assert accepted["reason"] == reason
    assert runs.children(name) == {}
    # The operator posts a pass's Events once its status is written, so they may trail it.
    refusal = ("Warning", reason, accepted["message"])
    wait_for(lambda: refusal in runs.events(name), 10, what=f"{name}'s {reason} Event")
    status = runs.status(name)
    assert status["terminal"]["outcome"] == "Failed"
    assert "cleanup" not in status["terminal"]
    assert runs.kstatus(name) == ("Failed", accepted["message"])  # a GitOps health check fails
    return accepted


def test_a_plan_over_the_token_budget_is_refused(runs, tmp_path):
    body = manifest("over-budget", str(tmp_path),
                    budget={"maxGeneratedTokens": 50, "stopAtLimit": False})
    runs.create(body)
    accepted = _refused(runs, "over-budget", "BudgetTooSmall")
    # 2 steps x 2 prompts x 2 completions x 8 tokens = 64 > 50
    assert "2 step(s) x 32 tokens = 64" in accepted["message"]
    assert "budget.maxGeneratedTokens 50" in accepted["message"]
    assert "= 64" in accepted["message"]


def test_stop_at_limit_needs_only_one_step_to_fit(runs, tmp_path):
    runs.create(manifest("one-step-fits", str(tmp_path),
                         budget={"maxGeneratedTokens": 50, "stopAtLimit": True}))
    wait_for(lambda: runs.condition("one-step-fits", "Accepted"), 30, what="acceptance")
    assert runs.condition("one-step-fits", "Accepted")["status"] == "True"
    runs.create(manifest("no-step-fits", str(tmp_path),
                         budget={"maxGeneratedTokens": 31, "stopAtLimit": True}))
    accepted = _refused(runs, "no-step-fits", "BudgetTooSmall")
    assert "one step's worst case" in accepted["message"]


def _pvc(runs, name: str, modes: list[str]) -> None:
    claim = client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=modes, storage_class_name="",
            resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"})),
    )
    runs.core.create_namespaced_persistent_volume_claim(runs.namespace, claim)


def test_a_missing_claim_is_refused(runs, tmp_path):
    runs.create(manifest("no-claim", str(tmp_path),
                         model={"volume": {"persistentVolumeClaim": {"claimName": "models"}}}))
    accepted = _refused(runs, "no-claim", "VolumeNotFound")
    assert "PersistentVolumeClaim models (model) does not exist" in accepted["message"]


def test_a_single_node_claim_for_shared_inputs_or_checkpoints_is_refused(runs, tmp_path):
    _pvc(runs, "models-rwo", ["ReadWriteOnce"])
    _pvc(runs, "ckpt-rox", ["ReadOnlyMany"])
    runs.create(manifest("rwo-model", str(tmp_path),
                         model={"volume": {"persistentVolumeClaim": {"claimName": "models-rwo"}}}))
    accepted = _refused(runs, "rwo-model", "VolumeAccessMode")
    assert "ReadOnlyMany or ReadWriteMany" in accepted["message"]
    runs.create(manifest("rox-ckpt", str(tmp_path), checkpoint={
        "volume": {"persistentVolumeClaim": {"claimName": "ckpt-rox"}}}))
    accepted = _refused(runs, "rox-ckpt", "VolumeAccessMode")
    assert "needs ReadWriteMany" in accepted["message"]


def test_a_python_reward_without_its_config_map_or_its_key_is_refused(runs, tmp_path):
    """Read by name at acceptance (the Ray pods would otherwise wait for it forever)."""
    reward = {"name": "python", "python": {"configMap": "my-reward", "key": "score.py"}}
    runs.create(manifest("no-reward-map", str(tmp_path), reward=reward))
    accepted = _refused(runs, "no-reward-map", "RewardNotFound")
    assert accepted["message"] == "ConfigMap my-reward (reward.python.configMap) does not exist"
    runs.core.create_namespaced_config_map(runs.namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="my-reward"), data={"reward.py": "def score(): 0"}))
    runs.create(manifest("no-reward-key", str(tmp_path), reward=reward))
    accepted = _refused(runs, "no-reward-key", "RewardNotFound")
    assert accepted["message"] == ("ConfigMap my-reward (reward.python.configMap) has no key "
                                   "score.py (reward.python.key); its keys: reward.py")


def test_checkpoints_inside_the_frozen_model_are_refused(runs, tmp_path):
    model = tmp_path / "model"
    runs.create(manifest("ckpt-in-model", str(tmp_path), checkpoint={"volume": {"hostPath": {
        "path": str(model / "checkpoints")}}}))
    accepted = _refused(runs, "ckpt-in-model", "FrozenInputOverlap")
    assert f"overlaps model.volume (directory {model})" in accepted["message"]


def test_a_host_path_outside_the_allowed_directories_is_refused(runs, tmp_path,
                                                                tmp_path_factory):
    """The session's operator allows hostPath under pytest's base directory only: a sibling
    whose name merely starts with it is outside, and so is a node directory."""
    allowed = tmp_path_factory.getbasetemp()
    sibling = f"{allowed}-x/model"
    runs.create(manifest("beside", str(tmp_path), model={"volume": {"hostPath": {
        "path": sibling}}}))
    accepted = _refused(runs, "beside", "HostPathNotAllowed")
    assert accepted["message"].startswith(f"model.volume.hostPath.path {sibling} is not under")
    assert str(allowed) in accepted["message"]
    runs.create(manifest("kubelet-dir", str(tmp_path), checkpoint={"volume": {"hostPath": {
        "path": "/var/lib/kubelet"}}}))
    accepted = _refused(runs, "kubelet-dir", "HostPathNotAllowed")
    assert accepted["message"].startswith("checkpoint.volume.hostPath.path /var/lib/kubelet")


def test_with_the_charts_defaults_no_host_path_is_accepted(cluster, chart_identity, runs,
                                                           tmp_path, request):
    """The operator as the chart installs it by default (no hostPathPrefixes) refuses every
    hostPath, the one under the tests' own directory included."""
    session = running_session_operator(request)
    with session.paused():
        defaults = OperatorProcess(cluster, tmp_path / "defaults-operator.log",
                                   kubeconfig=chart_identity.kubeconfig,
                                   env={**chart_identity.operator_env, "GRPO_METRICS_PORT": "0"})
        defaults.start()
        try:
            runs.create(manifest("host-dirs", str(tmp_path)))
            accepted = _refused(runs, "host-dirs", "HostPathNotAllowed")
        finally:
            defaults.stop()
        assert defaults.refusals() == []
    assert accepted["message"] == (
        f"model.volume.hostPath ({tmp_path}/model): this operator allows no hostPath volumes "
        "(GRPO_HOSTPATH_PREFIXES is empty); use a persistentVolumeClaim")
