"""The API server the harness starts is a real one: it serves, enforces RBAC and CRDs."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


def test_version_reports_the_pinned_release(k8s_api, cluster):
    version = client.VersionApi(k8s_api).get_code()
    pinned = (cluster.tools.root / "versions.env").read_text()
    assert f"KUBERNETES_VERSION={version.git_version}" in pinned


def _token_client(cluster, k8s_api, namespace: str, sa: str) -> client.ApiClient:
    core = client.CoreV1Api(k8s_api)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=sa))
    )
    token = core.create_namespaced_service_account_token(
        sa,
        namespace,
        client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)
        ),
    ).status.token
    path = cluster.write_kubeconfig(cluster.root / f"{namespace}-{sa}.kubeconfig", user=sa,
                                    token=token)
    from kubernetes import config

    return config.new_client_from_config(config_file=str(path))


def test_rbac_denies_then_allows_after_binding(cluster, k8s_api, namespace):
    sa_client = _token_client(cluster, k8s_api, namespace, "reader")
    as_sa = client.CoreV1Api(sa_client)

    with pytest.raises(ApiException) as denied:
        as_sa.list_namespaced_pod(namespace)
    assert denied.value.status == 403
    assert f"system:serviceaccount:{namespace}:reader" in denied.value.body

    rbac = client.RbacAuthorizationV1Api(k8s_api)
    rbac.create_namespaced_role(
        namespace,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="pod-reader"),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["list"])],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="reader-pods"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name="pod-reader"
            ),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name="reader",
                                           namespace=namespace)],
        ),
    )
    # The authorizer learns of the binding through its informer: allow it a moment.
    def allowed():
        try:
            return as_sa.list_namespaced_pod(namespace)
        except ApiException as e:
            if e.status == 403:
                return None
            raise

    assert wait_for(allowed, 10, what="the RoleBinding to take effect").items == []
    # The binding grants listing pods, nothing else.
    with pytest.raises(ApiException) as still_denied:
        as_sa.list_namespaced_secret(namespace)
    assert still_denied.value.status == 403
    sa_client.close()


WIDGET_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.test.grpo.dev
spec:
  group: test.grpo.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1}
              colour: {type: string, default: blue}
"""


def test_crd_installs_and_serves_custom_objects(cluster, k8s_api, namespace):
    cluster.kubectl("apply", "--server-side", "-f", "-", input=WIDGET_CRD)
    cluster.kubectl(
        "wait", "--for=condition=Established", "crd/widgets.test.grpo.dev", "--timeout=30s"
    )
    custom = client.CustomObjectsApi(k8s_api)
    body = {
        "apiVersion": "test.grpo.dev/v1",
        "kind": "Widget",
        "metadata": {"name": "w1"},
        "spec": {"size": 3},
    }
    custom.create_namespaced_custom_object("test.grpo.dev", "v1", namespace, "widgets", body)
    read = custom.get_namespaced_custom_object("test.grpo.dev", "v1", namespace, "widgets", "w1")
    assert read["spec"] == {"size": 3, "colour": "blue"}  # default applied by the server

    invalid = dict(body, metadata={"name": "w2"}, spec={"size": 0})
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object("test.grpo.dev", "v1", namespace, "widgets",
                                               invalid)
    assert refused.value.status == 422
    assert "spec.size" in refused.value.body
