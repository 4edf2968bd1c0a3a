"""The chart installed into the local control plane (the session's release, which the operator
of every operator test runs as): admitted under the restricted Pod Security Standard, and its
ServiceAccount allowed what the operator does and nothing else, as the API server decides."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tests.operator.conftest import RELEASE, RELEASE_NAMESPACE, helm

pytestmark = pytest.mark.cluster

NS = "default"  # any namespace: the session's release serves the whole cluster
# The release's report-signing key (the chart's fullname + "-report-signing").
SIGNING_SECRET = f"{RELEASE}-report-signing"

# (verb, group, resource, namespace) the operator must be allowed: a denial here would show up
# as a 403 in a lifecycle test.
ALLOWED = [
    ("list", "grpo.dev", "grporuns", None),
    ("watch", "grpo.dev", "grporuns", None),
    ("get", "grpo.dev", "grporuns", NS),
    ("patch", "grpo.dev", "grporuns", NS),
    ("delete", "grpo.dev", "grporuns", NS),
    ("patch", "grpo.dev", "grporuns/status", NS),
    ("create", "", "events", NS),
    ("create", "", "serviceaccounts", NS),
    ("get", "", "serviceaccounts", NS),
    ("create", "", "secrets", NS),
    ("get", "", "secrets", NS),
    ("create", "", "configmaps", NS),
    ("get", "", "configmaps", NS),
    ("patch", "", "configmaps", NS),
    ("create", "rbac.authorization.k8s.io", "roles", NS),
    ("get", "rbac.authorization.k8s.io", "roles", NS),
    ("create", "rbac.authorization.k8s.io", "rolebindings", NS),
    ("get", "rbac.authorization.k8s.io", "rolebindings", NS),
    ("create", "networking.k8s.io", "networkpolicies", NS),
    ("get", "networking.k8s.io", "networkpolicies", NS),
    ("create", "ray.io", "rayclusters", NS),
    ("get", "ray.io", "rayclusters", NS),
    ("list", "ray.io", "rayclusters", NS),
    ("watch", "ray.io", "rayclusters", NS),
    ("delete", "ray.io", "rayclusters", NS),
    ("create", "batch", "jobs", NS),
    ("get", "batch", "jobs", NS),
    ("delete", "batch", "jobs", NS),
    *((verb, group, resource, NS) for verb in ("list", "watch")  # the cached children
      for group, resource in (("", "configmaps"), ("", "serviceaccounts"),
                              ("rbac.authorization.k8s.io", "roles"),
                              ("networking.k8s.io", "networkpolicies"), ("batch", "jobs"),
                              ("", "pods"))),
    ("get", "", "persistentvolumeclaims", NS),
    ("list", "kueue.x-k8s.io", "workloads", NS),
    ("list", "apiextensions.k8s.io", "customresourcedefinitions", None),
    ("watch", "apiextensions.k8s.io", "customresourcedefinitions", None),
]

# What it must not do: list or change Secrets (it reads one by name only when a child's name is
# taken, to see who controls it), write what it does not own, touch the RayCluster's spec
# (Kueue owns spec.suspend), widen anyone's rights.
DENIED = [
    ("list", "", "secrets", NS),
    ("update", "", "secrets", NS),
    ("patch", "", "secrets", NS),
    ("delete", "", "secrets", NS),
    ("watch", "", "secrets", None),
    ("update", "grpo.dev", "grporuns", NS),
    ("create", "grpo.dev", "grporuns", NS),
    ("update", "grpo.dev", "grporuns/status", NS),
    ("update", "", "configmaps", NS),
    ("delete", "", "configmaps", NS),
    ("patch", "networking.k8s.io", "networkpolicies", NS),
    ("delete", "networking.k8s.io", "networkpolicies", NS),
    ("patch", "ray.io", "rayclusters", NS),
    ("update", "ray.io", "rayclusters", NS),
    ("get", "kueue.x-k8s.io", "workloads", NS),
    ("patch", "kueue.x-k8s.io", "workloads", NS),
    ("create", "", "pods", NS),
    ("delete", "", "pods", NS),
    ("create", "", "serviceaccounts/token", NS),
    ("create", "apps", "deployments", NS),
    ("get", "", "nodes", None),
    ("escalate", "rbac.authorization.k8s.io", "roles", NS),
    ("bind", "rbac.authorization.k8s.io", "roles", NS),
    ("create", "rbac.authorization.k8s.io", "clusterroles", None),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", None),
    ("impersonate", "", "serviceaccounts", NS),
    ("patch", "apiextensions.k8s.io", "customresourcedefinitions", None),
]


def can(api: client.ApiClient, verb: str, group: str, resource: str,
        namespace: str | None, name: str | None = None) -> bool:
    """The API server's answer to a SelfSubjectAccessReview made as ``api``'s user."""
    resource, _, subresource = resource.partition("/")
    review = client.AuthorizationV1Api(api).create_self_subject_access_review(
        client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, group=group, resource=resource, subresource=subresource or None,
                namespace=namespace, name=name))))
    return review.status.allowed


@pytest.fixture(scope="module")
def as_operator(chart_identity):
    api = chart_identity.api_client()
    yield api
    api.close()


def _id(case) -> str:
    verb, group, resource, namespace = case
    return f"{verb}-{group or 'core'}-{resource}{'' if namespace else '-cluster'}"


def test_the_release_is_deployed_and_its_pod_admitted_as_restricted(cluster, chart_identity,
                                                                    k8s_api):
    status = json.loads(helm(cluster, "status", RELEASE, "-n", RELEASE_NAMESPACE,
                             "-o", "json").stdout)
    assert status["info"]["status"] == "deployed"
    ns = client.CoreV1Api(k8s_api).read_namespace(RELEASE_NAMESPACE)
    assert ns.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    deployment = client.AppsV1Api(k8s_api).read_namespaced_deployment(RELEASE, RELEASE_NAMESPACE)
    assert deployment.status.available_replicas == 2  # one leads, one stands by
    pods = client.CoreV1Api(k8s_api).list_namespaced_pod(
        RELEASE_NAMESPACE, label_selector=f"app.kubernetes.io/instance={RELEASE}").items
    assert [p.spec.service_account_name for p in pods] == [chart_identity.service_account] * 2
    assert chart_identity.watch_namespaces == ()


@pytest.mark.parametrize("case", ALLOWED, ids=_id)
def test_the_operator_identity_may_do_what_the_operator_does(as_operator, case):
    assert can(as_operator, *case)


@pytest.mark.parametrize("case", DENIED, ids=_id)
def test_the_operator_identity_may_do_nothing_else(as_operator, case):
    assert not can(as_operator, *case)


def test_listing_secrets_is_refused_by_the_api_server(as_operator):
    """Not only the review: listing Secrets is a 403 (one is read by name only)."""
    with pytest.raises(client.ApiException) as refused:
        client.CoreV1Api(as_operator).list_namespaced_secret(NS)
    assert refused.value.status == 403


def test_the_signing_secret_is_made_and_read_in_the_release_namespace(as_operator):
    assert can(as_operator, "get", "", "secrets", RELEASE_NAMESPACE, SIGNING_SECRET)
    assert can(as_operator, "create", "", "secrets", RELEASE_NAMESPACE)
    for verb in ("list", "watch", "update", "patch", "delete"):
        assert not can(as_operator, verb, "", "secrets", RELEASE_NAMESPACE, SIGNING_SECRET), verb


def test_the_lease_is_read_and_renewed_by_name_in_the_release_namespace(as_operator):
    lease = f"{RELEASE}-leader"
    group = "coordination.k8s.io"
    for verb in ("get", "update"):
        assert can(as_operator, verb, group, "leases", RELEASE_NAMESPACE, lease), verb
        assert not can(as_operator, verb, group, "leases", RELEASE_NAMESPACE, "other"), verb
    assert can(as_operator, "create", group, "leases", RELEASE_NAMESPACE)
    for verb in ("list", "watch", "delete", "patch"):
        assert not can(as_operator, verb, group, "leases", RELEASE_NAMESPACE, lease), verb
    assert not can(as_operator, "get", group, "leases", NS, lease)  # nowhere else

