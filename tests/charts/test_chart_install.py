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
    ("create", "", "secrets", NS),
    ("create", "", "configmaps", NS),
    ("get", "", "configmaps", NS),
    ("patch", "", "configmaps", NS),
    ("update", "", "configmaps", NS),
    ("create", "rbac.authorization.k8s.io", "roles", NS),
    ("create", "rbac.authorization.k8s.io", "rolebindings", NS),
    ("create", "ray.io", "rayclusters", NS),
    ("get", "ray.io", "rayclusters", NS),
    ("list", "ray.io", "rayclusters", NS),
    ("watch", "ray.io", "rayclusters", NS),
    ("delete", "ray.io", "rayclusters", NS),
    ("create", "batch", "jobs", NS),
    ("get", "batch", "jobs", NS),
    ("delete", "batch", "jobs", NS),
    ("list", "", "pods", NS),
    ("get", "", "persistentvolumeclaims", NS),
    ("list", "apiextensions.k8s.io", "customresourcedefinitions", None),
    ("watch", "apiextensions.k8s.io", "customresourcedefinitions", None),
]

# What it must not do: read any Secret, write what it does not own, touch the RayCluster's
# spec (Kueue owns spec.suspend), widen anyone's rights.
DENIED = [
    ("get", "", "secrets", NS),
    ("list", "", "secrets", NS),
    ("watch", "", "secrets", None),
    ("update", "grpo.dev", "grporuns", NS),
    ("create", "grpo.dev", "grporuns", NS),
    ("update", "grpo.dev", "grporuns/status", NS),
    ("list", "", "configmaps", NS),
    ("delete", "", "configmaps", NS),
    ("patch", "ray.io", "rayclusters", NS),
    ("update", "ray.io", "rayclusters", NS),
    ("list", "batch", "jobs", NS),
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
        namespace: str | None) -> bool:
    """The API server's answer to a SelfSubjectAccessReview made as ``api``'s user."""
    resource, _, subresource = resource.partition("/")
    review = client.AuthorizationV1Api(api).create_self_subject_access_review(
        client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, group=group, resource=resource, subresource=subresource or None,
                namespace=namespace))))
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
    assert deployment.status.available_replicas == 1
    pods = client.CoreV1Api(k8s_api).list_namespaced_pod(
        RELEASE_NAMESPACE, label_selector=f"app.kubernetes.io/instance={RELEASE}").items
    assert [p.spec.service_account_name for p in pods] == [chart_identity.service_account]
    assert chart_identity.watch_namespaces == ()


@pytest.mark.parametrize("case", ALLOWED, ids=_id)
def test_the_operator_identity_may_do_what_the_operator_does(as_operator, case):
    assert can(as_operator, *case)


@pytest.mark.parametrize("case", DENIED, ids=_id)
def test_the_operator_identity_may_do_nothing_else(as_operator, case):
    assert not can(as_operator, *case)


def test_reading_a_secret_is_refused_by_the_api_server(as_operator, k8s_api):
    """Not only the review: reading or listing a Secret that exists is a 403."""
    secret = client.CoreV1Api(k8s_api).create_namespaced_secret(NS, client.V1Secret(
        metadata=client.V1ObjectMeta(generate_name="chart-test-"), string_data={"k": "v"}))
    core = client.CoreV1Api(as_operator)
    for call, args in ((core.read_namespaced_secret, (secret.metadata.name, NS)),
                       (core.list_namespaced_secret, (NS,))):
        with pytest.raises(client.ApiException) as refused:
            call(*args)
        assert refused.value.status == 403
