"""The chart's allowedImages, enforced by the real API server (the chart's
ValidatingAdmissionPolicy, applied as `helm template` renders it): a run whose image is not on
the list is refused at `kubectl apply` with the list, a change of a stored run's image to one is
refused, and every other update of a run stored before the policy still passes."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client

from grpo_operator.api.constants import GROUP, PLURAL, VERSION
from tests.conftest import delete_namespace, new_namespace
from tests.operator.conftest import CHART, helm
from tests.operator.lifecycle.runs import manifest
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

RELEASE = "images"
ALLOWED = ["registry.example.com/ml/", "grpo-trainer:0.1.0"]


def run(name: str, image: str) -> dict:
    # hostPaths outside every allowed prefix: an operator serving the namespace refuses the
    # run at acceptance and creates nothing for it.
    return manifest(name, "/nonexistent", resources__image=image)


@pytest.fixture(scope="module")
def served(cluster, k8s_api, grporun_crd) -> Iterator[tuple[str, str]]:
    """The chart's policy objects bound to one fresh namespace (the others stay unaffected),
    and a namespace outside the binding."""
    inside, outside = new_namespace(k8s_api, "images"), new_namespace(k8s_api, "images-out")
    rendered = helm(cluster, "template", RELEASE, str(CHART), "--namespace", "grpo-system",
                    "-s", "templates/allowed-images.yaml",
                    "--set-json", f"allowedImages={json.dumps(ALLOWED)}",
                    "--set", f"watchNamespaces={{{inside}}}").stdout
    kinds = [d["kind"] for d in yaml.safe_load_all(rendered) if d]
    assert kinds == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"], kinds
    # A run stored before the policy, with an image the policy would refuse.
    custom = client.CustomObjectsApi(k8s_api)
    custom.create_namespaced_custom_object(GROUP, VERSION, inside, PLURAL,
                                           run("before", "elsewhere.example.com/trainer:1"))
    cluster.kubectl("apply", "-f", "-", input=rendered)
    try:
        yield inside, outside
    finally:
        cluster.kubectl("delete", "-f", "-", "--ignore-not-found", input=rendered)
        delete_namespace(k8s_api, inside)
        delete_namespace(k8s_api, outside)


def apply(cluster, namespace: str, body: dict) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-",
                           input=yaml.safe_dump(body), check=False)


def test_an_image_off_the_list_is_refused_at_kubectl_apply_with_the_list(cluster, served):
    inside, outside = served
    # The API server loads a new policy within moments; until then a dry run still passes.
    refused = wait_for(lambda: (p := apply(cluster, inside, run("off", "evil.example.com/x:1")))
                       .returncode != 0 and p, 60, what="the policy in force")
    assert "spec.resources.image evil.example.com/x:1 is not allowed by this installation" in (
        refused.stderr), refused.stderr
    assert "(allowed: registry.example.com/ml/, grpo-trainer:0.1.0)" in refused.stderr

    for image in ("registry.example.com/ml/grpo-trainer:0.2.0",
                  "registry.example.com/ml/team/grpo@sha256:" + "0" * 64, "grpo-trainer:0.1.0"):
        proc = apply(cluster, inside, run("on", image))
        assert proc.returncode == 0, (image, proc.stderr)
    # A prefix is a path: registry.example.com/ml/ does not allow registry.example.com/mlx/...;
    # an exact entry allows no other tag.
    for image in ("registry.example.com/mlx/grpo-trainer:0.1.0", "registry.example.com/ml",
                  "grpo-trainer:0.1.0-rc1", "docker.io/library/grpo-trainer:0.1.0"):
        proc = apply(cluster, inside, run("off", image))
        assert proc.returncode != 0 and "is not allowed" in proc.stderr, (image, proc.stderr)
    # The binding covers the namespaces the release serves, no others.
    assert apply(cluster, outside, run("off", "evil.example.com/x:1")).returncode == 0


def test_a_stored_run_keeps_working_but_cannot_change_to_another_refused_image(k8s_api,
                                                                                served):
    inside, _ = served
    custom = client.CustomObjectsApi(k8s_api)

    def patch(body: dict) -> None:
        custom.patch_namespaced_custom_object(GROUP, VERSION, inside, PLURAL, "before", body)

    def refused() -> bool:
        try:
            patch({"spec": {"resources": {"image": "elsewhere.example.com/trainer:2"}}})
        except client.ApiException as e:
            assert e.status == 403 and "is not allowed by this installation" in e.body, e.body
            return True
        return False

    wait_for(refused, 60, what="the policy in force")
    # Updates that leave the image alone pass (the operator's finalizer and annotations too).
    patch({"metadata": {"annotations": {"example.com/note": "kept"}}})
    patch({"spec": {"resources": {"image": "registry.example.com/ml/grpo-trainer:0.2.0"}}})
    stored = custom.get_namespaced_custom_object(GROUP, VERSION, inside, PLURAL, "before")
    assert stored["spec"]["resources"]["image"] == "registry.example.com/ml/grpo-trainer:0.2.0"
