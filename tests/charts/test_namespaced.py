"""A second release limited to one namespace (watchNamespaces): its identity is granted only
there, and its operator serves only there — a GRPORun elsewhere is left alone."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from tests.charts.conftest import new_namespace, session_operator_paused
from tests.charts.test_chart_install import can
from tests.operator.conftest import OperatorProcess, helm, install_chart
from tests.operator.lifecycle.runs import Runs, manifest
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

RELEASE = "grpo-team"
RELEASE_NAMESPACE = "grpo-team-system"
# The chart's fullname is "<release>-grpo-operator" for a release not named after the chart.
SIGNING_SECRET = f"{RELEASE}-grpo-operator-report-signing"


@pytest.fixture(scope="module")
def team(cluster, k8s_api, grporun_crd, tmp_path_factory):
    """Two namespaces and a release that serves only the first."""
    served = new_namespace(k8s_api, "team-a")
    other = new_namespace(k8s_api, "team-b")
    identity = install_chart(cluster, k8s_api, RELEASE, RELEASE_NAMESPACE,
                             tmp_path_factory.mktemp("team"),
                             "--set", f"watchNamespaces={{{served}}}")
    yield identity, served, other
    helm(cluster, "uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait")
    core = client.CoreV1Api(k8s_api)
    for ns in (served, other, RELEASE_NAMESPACE):
        core.delete_namespace(ns)


def test_the_grant_stops_at_the_listed_namespace(team):
    identity, served, other = team
    assert identity.watch_namespaces == (served,)
    api = identity.api_client()
    try:
        for verb, group, resource in (("create", "", "configmaps"), ("create", "", "secrets"),
                                      ("create", "ray.io", "rayclusters"),
                                      ("create", "networking.k8s.io", "networkpolicies"),
                                      ("list", "grpo.dev", "grporuns"),
                                      ("patch", "grpo.dev", "grporuns/status")):
            assert can(api, verb, group, resource, served), (verb, resource, served)
            assert not can(api, verb, group, resource, other), (verb, resource, other)
        assert not can(api, "list", "grpo.dev", "grporuns", None)
        assert can(api, "get", "", "secrets", served)  # whose is a child's name, if taken
        assert not can(api, "get", "", "secrets", other)
        assert not can(api, "list", "", "secrets", served)
        assert not can(api, "update", "", "configmaps", served)
        # Its report-signing key, in its own namespace only, and by that name only.
        assert can(api, "get", "", "secrets", RELEASE_NAMESPACE, SIGNING_SECRET)
        assert can(api, "create", "", "secrets", RELEASE_NAMESPACE)
        assert not can(api, "get", "", "secrets", RELEASE_NAMESPACE, "another-secret")
        assert not can(api, "list", "", "secrets", RELEASE_NAMESPACE)
        # kopf's cluster-wide discovery, read-only.
        assert can(api, "list", "", "namespaces", None)
        assert can(api, "watch", "apiextensions.k8s.io", "customresourcedefinitions", None)
        assert not can(api, "delete", "", "namespaces", None)
    finally:
        api.close()


def test_a_run_outside_the_listed_namespace_is_left_alone(cluster, k8s_api, team, tmp_path,
                                                          request):
    identity, served, other = team
    ours, theirs = Runs(k8s_api, served), Runs(k8s_api, other)
    over_budget = {"budget": {"maxGeneratedTokens": 50, "stopAtLimit": False}}
    # A cluster-wide operator would serve both namespaces: if the session's runs, it is stopped,
    # so that only the team's acts.
    with session_operator_paused(request):
        theirs.create(manifest("elsewhere", str(tmp_path), **over_budget))
        ours.create(manifest("here", str(tmp_path), **over_budget))
        team_operator = OperatorProcess(cluster, tmp_path / "team-operator.log",
                                        kubeconfig=identity.kubeconfig,
                                        env=identity.operator_env)
        team_operator.start()
        try:
            wait_for(lambda: ours.phase("here") == "Failed", 30, what="the served run")
            assert ours.condition("here", "Accepted")["reason"] == "BudgetTooSmall"
            time.sleep(3)  # the unserved run had as long as the served one, and more
            # Only the CRD's default: generation 1 never observed.
            assert theirs.status("elsewhere")["observedGeneration"] == 0
            assert "phase" not in theirs.status("elsewhere")
        finally:
            team_operator.stop()
        assert team_operator.refusals() == []
        theirs.delete("elsewhere")
