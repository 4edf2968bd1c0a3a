"""Nobody but the run's own chain decides how it ends. A namespace editor (a real RoleBinding
to the `edit` ClusterRole, a real token) writes forged reports into a running run's report
ConfigMap: each is refused with a Warning Event, genuine reports still count after a forged
sequence of 2^53, and the run whose driver the editor then deletes is never Succeeded."""

from __future__ import annotations

import json

import pytest
from kubernetes import client, config

from grpo_operator.api.report import REPORT_KEY, REPORT_SIGNATURE_KEY
from tests.operator.lifecycle.runs import tiny_example
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.second_cluster]


def editor_client(cluster, admin: client.ApiClient, namespace: str, directory) -> client.ApiClient:
    core = client.CoreV1Api(admin)
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(
        metadata=client.V1ObjectMeta(name="editor")))
    client.RbacAuthorizationV1Api(admin).create_namespaced_role_binding(
        namespace, client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="editor"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole",
                                      name="edit"),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name="editor",
                                           namespace=namespace)]))
    token = core.create_namespaced_service_account_token(
        "editor", namespace, client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))).status.token
    kubeconfig = cluster.write_kubeconfig(
        directory / "editor.kubeconfig", user=f"system:serviceaccount:{namespace}:editor",
        token=token)
    return config.new_client_from_config(config_file=str(kubeconfig))


def forged(status: dict, sequence: int) -> str:
    """A well-formed terminal report of the current attempt claiming success."""
    attempt = status["recovery"]["attempt"]
    ledger = status.get("ledger") or {}
    return json.dumps({
        "schemaVersion": 1, "attempt": attempt, "sequence": sequence,
        "time": "2026-12-01T00:00:00Z", "state": "Finished",
        "ledger": {"plannedSteps": ledger.get("plannedSteps", 1),
                   "completedSteps": ledger.get("plannedSteps", 1)},
        "terminal": {"outcome": "Succeeded", "reason": "Completed", "message": "forged",
                     "finishedTime": "2026-12-01T00:00:00Z",
                     "artifact": {"path": "/checkpoints/forged", "step": 1,
                                  "sha256": "f" * 64}},
    })


def test_a_namespace_editor_cannot_decide_how_a_run_ends(cluster, k8s_api, runs, tmp_path):
    body = tiny_example(tmp_path)
    name = body["metadata"]["name"]
    # Long enough to forge while it trains (the driver is deleted long before the end).
    body["spec"]["algorithm"]["maxSteps"] = 500
    # Its evaluations (16 prompts every 2 steps) would not fit the example's token budget.
    body["spec"]["budget"]["maxGeneratedTokens"] = 10**7
    body["spec"]["checkpoint"]["intervalSteps"] = 50
    body["spec"]["runPolicy"]["maxRestarts"] = 0
    runs.create(body)
    editor = client.CoreV1Api(editor_client(cluster, k8s_api, runs.namespace, tmp_path))
    report_map = f"{name}-report"

    def accepted() -> int:
        return (runs.status(name).get("acceptedReport") or {}).get("sequence", -1)

    wait_for(lambda: runs.running_driver_pod(name) and accepted() >= 1, 300,
             what="the driver relaying reports")

    def forge_until_rejected(text: str, signature: str | None, why: str) -> None:
        """Write the forgery until the operator has judged it (the genuine driver may
        overwrite it with its next report first)."""
        data = {REPORT_KEY: text, REPORT_SIGNATURE_KEY: signature}

        def rejected() -> bool:
            editor.patch_namespaced_config_map(report_map, runs.namespace, {"data": data})
            return any(e[:2] == ("Warning", "ReportRejected") and why in e[2]
                       for e in runs.events(name))
        wait_for(rejected, 60, interval=1, what=f"the {why} report rejected")

    forge_until_rejected(forged(runs.status(name), accepted() + 1), None, "unsigned")
    huge = forged(runs.status(name), 2**53)
    forge_until_rejected(huge, "0" * 64, "bad signature")
    before = accepted()
    assert before < 2**53
    wait_for(lambda: accepted() > before, 120, what="a genuine report after the forgery")

    # The driver lost, its report replaced by a forged success until the run has ended: the
    # exit code decides (an interruption, and no restart left), never the forgery.
    pod = runs.running_driver_pod(name)
    editor.delete_namespaced_pod(pod.metadata.name, runs.namespace)
    forgery = {REPORT_KEY: forged(runs.status(name), accepted() + 1000),
               REPORT_SIGNATURE_KEY: None}

    def ended() -> bool:
        if runs.phase(name) in ("Succeeded", "Failed"):
            return True
        editor.patch_namespaced_config_map(report_map, runs.namespace, {"data": forgery})
        return False
    wait_for(ended, 180, interval=1, what="the end")
    status = runs.status(name)
    assert status["phase"] == "Failed", status.get("terminal")
    assert status["terminal"]["reason"] == "MaxRestartsExceeded"
    assert "artifact" not in status["terminal"]
