"""The Argo CD health check for GRPORun (deploy/argocd/health.lua), run by a real Lua 5.1
interpreter the way Argo CD runs it (gopher-lua: Lua 5.1, only the base and table libraries,
the object as the global ``obj``), against statuses the operator wrote in the local cluster
and hand-written statuses for the phases it cannot reach there yet."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from lupa import lua51

from grpo_operator.api.constants import Phase
from tests.operator.conftest import REPO
from tests.operator.lifecycle.runs import manifest
from tests.waiting import wait_for

HEALTH_LUA = REPO / "deploy" / "argocd" / "health.lua"
ARGOCD_CM = REPO / "deploy" / "argocd" / "argocd-cm.yaml"
HEALTH_KEY = "resource.customizations.health.grpo.dev_GRPORun"


def _lua_value(lua, value: Any) -> Any:
    if isinstance(value, dict):
        return lua.table_from({k: _lua_value(lua, v) for k, v in value.items()})
    if isinstance(value, list):
        return lua.table_from([_lua_value(lua, v) for v in value])
    return value


def health(obj: dict[str, Any]) -> tuple[str, str]:
    """(hs.status, hs.message) for ``obj``, in a sandbox like Argo CD's."""
    lua = lua51.LuaRuntime()
    # Argo CD opens only base, table, package and a safe os; no string library, and so no
    # string methods either.
    lua.execute("debug.setmetatable('', nil); string, io, math, debug, coroutine, os ="
                " nil, nil, nil, nil, nil, nil")
    lua.globals().obj = _lua_value(lua, obj)
    hs = lua.execute(HEALTH_LUA.read_text())
    return hs["status"], hs["message"]


def test_the_argocd_cm_snippet_carries_the_same_script():
    data = yaml.safe_load(ARGOCD_CM.read_text())["data"]
    assert data[HEALTH_KEY] == HEALTH_LUA.read_text()


# -- statuses written by the operator ------------------------------------------------------


@pytest.mark.cluster
def test_a_run_refused_at_acceptance_is_degraded_with_the_reason(runs, tmp_path):
    runs.create(manifest("refused", str(tmp_path),
                         budget={"maxGeneratedTokens": 50, "stopAtLimit": False}))
    wait_for(lambda: runs.phase("refused") == "Failed", 30, what="the refusal")
    accepted = runs.condition("refused", "Accepted")
    status, message = health(runs.get("refused"))
    assert status == "Degraded"
    assert message == f"Not accepted: BudgetTooSmall: {accepted['message']}"


@pytest.mark.cluster
def test_a_provisioning_run_is_progressing(runs, tmp_path):
    runs.create(manifest("waiting", str(tmp_path), resources__gpusPerWorker=16))
    wait_for(lambda: runs.phase("waiting") == "Provisioning", 30, what="Provisioning")
    # One read: the scheduler's word on the pods may reach the condition's message any time.
    run = runs.get("waiting")
    ready = next(c for c in run["status"]["conditions"] if c["type"] == "ClusterReady")
    detail = ready["reason"] + (f": {ready['message']}" if ready["message"] else "")
    assert health(run) == ("Progressing", f"Provisioning the RayCluster (ClusterReady: {detail})")


@pytest.mark.cluster
def test_a_spec_change_is_progressing_until_the_operator_observes_it(runs, tmp_path):
    runs.create(manifest("edited", str(tmp_path),
                         budget={"maxGeneratedTokens": 50, "stopAtLimit": False}))
    wait_for(lambda: runs.phase("edited") == "Failed", 30, what="the refusal")
    edited = runs.custom.patch_namespaced_custom_object(
        "grpo.dev", "v1alpha1", runs.namespace, "grporuns", "edited",
        {"spec": {"runPolicy": {"maxRestarts": 2}}})
    # The edit's own response: generation 2, status still of generation 1.
    assert edited["metadata"]["generation"] == 2
    assert edited["status"]["observedGeneration"] == 1
    assert health(edited) == ("Progressing",
                              "Waiting for the operator to observe generation 2")
    observed = wait_for(lambda: (run := runs.get("edited"))["status"]["observedGeneration"] == 2
                        and run, 30, what="the operator to observe generation 2")
    assert health(observed)[0] == "Degraded"


# -- statuses the operator cannot reach on the local cluster yet ----------------------------

BASE = {
    "apiVersion": "grpo.dev/v1alpha1",
    "kind": "GRPORun",
    "metadata": {"name": "gsm8k", "namespace": "team-a", "generation": 3},
    "spec": {"runPolicy": {"queueName": "team-a-gpus"}},
    "status": {
        "observedGeneration": 3,
        "ledger": {"plannedSteps": 100, "completedSteps": 40},
        "recovery": {"attempt": 1, "restarts": 0, "maxRestarts": 3},
        "conditions": [],
    },
}


def run_in(phase: str, **status: Any) -> dict[str, Any]:
    obj = copy.deepcopy(BASE)
    obj["status"].update(phase=phase, **status)
    return obj


def cond(type_: str, value: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": value, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 3}


CASES = {
    "no-status-yet": (
        {k: v for k, v in BASE.items() if k != "status"},
        "Progressing", "Waiting for the operator to pick up the run"),
    "pending": (run_in("Pending"), "Progressing", "Pending"),
    "accepted": (run_in("Accepted"), "Progressing", "Accepted"),
    "queued": (run_in("Queued"), "Progressing",
               "Queued in Kueue LocalQueue team-a-gpus, waiting for admission"),
    "provisioning": (
        run_in("Provisioning", conditions=[cond("ClusterReady", "False", "WorkersNotReady")]),
        "Progressing", "Provisioning the RayCluster (ClusterReady: WorkersNotReady)"),
    "running": (run_in("Running"), "Progressing", "Running: step 40/100, attempt 1"),
    "running-with-eta": (
        run_in("Running", progress={"activity": "Training", "eta": "3m20s", "percent": 40}),
        "Progressing", "Running: step 40/100, attempt 1, ETA 3m20s"),
    "checkpointing": (
        run_in("Running", progress={"activity": "Checkpointing", "eta": "3m20s"}),
        "Progressing", "Running: step 40/100, attempt 1, Checkpointing, ETA 3m20s"),
    "starting-engines": (
        run_in("Running", progress={"activity": "StartingEngines"}),
        "Progressing", "Running: step 40/100, attempt 1, StartingEngines"),
    "recovering": (
        run_in("Recovering", recovery={"attempt": 2, "restarts": 1, "maxRestarts": 3},
               conditions=[cond("Recovering", "True", "RetryableFailure", "driver exited 75")]),
        "Progressing",
        "Recovering at step 40/100: attempt 2, restart 1 of 3 "
        "(RetryableFailure: driver exited 75)"),
    "suspended": (run_in("Suspended"), "Suspended",
                  "Suspended at step 40/100; resumes from its checkpoint when "
                  "runPolicy.suspend is false"),
    "succeeded": (
        run_in("Succeeded", ledger={"plannedSteps": 100, "completedSteps": 100},
               terminal={"outcome": "Succeeded", "reason": "Completed", "message": "done",
                         "artifact": {"path": "/checkpoints/uid/step_100", "step": 100,
                                      "sha256": "a" * 64}}),
        "Healthy", "Succeeded at step 100/100; artifact /checkpoints/uid/step_100"),
    "failed": (
        run_in("Failed", terminal={"outcome": "Failed", "reason": "FrozenInputChanged",
                                   "message": "the dataset's digest changed"},
               conditions=[cond("Accepted", "True", "Accepted"),
                           cond("Failed", "True", "FrozenInputChanged")]),
        "Degraded", "Failed: FrozenInputChanged: the dataset's digest changed"),
    "failed-without-terminal": (
        run_in("Failed", conditions=[cond("Failed", "True", "DeadlineExceeded", "too slow")]),
        "Degraded", "Failed: DeadlineExceeded: too slow"),
    "cancelled": (
        run_in("Cancelled", terminal={"outcome": "Cancelled", "reason": "Cancelled",
                                      "message": "runPolicy.cancel is true"}),
        "Degraded", "Cancelled at step 40/100: runPolicy.cancel is true"),
    "stale-terminal": (
        run_in("Succeeded", observedGeneration=2), "Progressing",
        "Waiting for the operator to observe generation 3"),
    "unknown-phase": (run_in("Exploded"), "Unknown", "Unknown phase Exploded"),
}


@pytest.mark.parametrize("case", CASES)
def test_each_phase_maps_to_its_health(case):
    obj, status, message = CASES[case]
    assert health(obj) == (status, message)


def test_every_phase_is_covered():
    covered = {obj.get("status", {}).get("phase") for obj, _, _ in CASES.values()}
    assert {str(p) for p in Phase} <= covered
