"""The chart as Helm renders it: lint, the objects for the default and the namespaced
configurations, least-privilege rules, hardened pods, and the schema refusing bad values."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from grpo_operator.api.generate import CHART_CRD_PATH, CHART_DIR, CRD_PATH, DOCS_PATH
from grpo_operator.api.generate import main as generate
from localcluster.binaries import ensure_built
from tests.operator.conftest import CHART, REPO

NAMESPACED = ("--set", "watchNamespaces={team-a,team-b}")


@pytest.fixture(scope="module")
def helm_bin() -> str:
    return ensure_built().bin("helm")


def run_helm(helm_bin: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm_bin, *args], capture_output=True, text=True, timeout=60)


def render(helm_bin: str, *args: str) -> list[dict]:
    proc = run_helm(helm_bin, "template", "grpo-operator", str(CHART),
                    "--namespace", "grpo-system", *args)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def rules_of(docs: list[dict], kind: str) -> list[dict]:
    return [rule for d in by_kind(docs, kind) for rule in d["rules"]]


def grants(rules: list[dict]) -> set[tuple[str, str, str]]:
    """(group, resource, verb) for every rule."""
    return {(g, r, v) for rule in rules for g in rule["apiGroups"]
            for r in rule["resources"] for v in rule["verbs"]}


# What the operator does in a namespace it serves (see the chart's README for why).
WATCHED = ("list", "watch")
RUN_GRANTS = {
    ("grpo.dev", "grporuns", "get"), ("grpo.dev", "grporuns", "list"),
    ("grpo.dev", "grporuns", "watch"), ("grpo.dev", "grporuns", "patch"),
    ("grpo.dev", "grporuns", "delete"),
    ("grpo.dev", "grporuns/status", "patch"),
    ("", "events", "create"),
    ("", "configmaps", "patch"),
    ("", "secrets", "create"), ("", "secrets", "get"),  # never listed
    ("ray.io", "rayclusters", "delete"), ("batch", "jobs", "delete"),
    ("", "persistentvolumeclaims", "get"),
    ("kueue.x-k8s.io", "workloads", "list"),  # while Kueue holds a run's cluster: why it waits
    # The cached children: made, watched, and read by name only when a name is taken.
    *{(group, resource, verb)
      for group, resource in (("", "configmaps"), ("", "serviceaccounts"),
                              ("rbac.authorization.k8s.io", "roles"),
                              ("rbac.authorization.k8s.io", "rolebindings"),
                              ("networking.k8s.io", "networkpolicies"),
                              ("ray.io", "rayclusters"), ("batch", "jobs"))
      for verb in ("create", "get", *WATCHED)},
    *{("", "pods", verb) for verb in WATCHED},
}
CRD_GRANTS = {("apiextensions.k8s.io", "customresourcedefinitions", "list"),
              ("apiextensions.k8s.io", "customresourcedefinitions", "watch")}
SIGNING = "grpo-operator-report-signing"  # the release's fullname + "-report-signing"
# In the release namespace only: the operator's report-signing key, read by name, or created.
SIGNING_RULES = [
    {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [SIGNING], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
]


LEASE = "grpo-operator-leader"  # the release's fullname + "-leader"
# In the release namespace only, with leader election: the one Lease, read and renewed by name.
LEASE_RULES = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [LEASE],
     "verbs": ["get", "update"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
]
RELEASE_ROLES = (SIGNING, LEASE)


def release_role(docs: list[dict], name: str) -> dict:
    """A Role of the release namespace, checked bound to the release's ServiceAccount."""
    [role] = [r for r in by_kind(docs, "Role") if r["metadata"]["name"] == name]
    [binding] = [b for b in by_kind(docs, "RoleBinding") if b["metadata"]["name"] == name]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "grpo-system"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": name}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "grpo-operator", "namespace": "grpo-system"}]
    return role


def signing_role(docs: list[dict]) -> dict:
    return release_role(docs, SIGNING)


def run_roles(docs: list[dict]) -> list[dict]:
    return [r for r in by_kind(docs, "Role") if r["metadata"]["name"] not in RELEASE_ROLES]


@pytest.mark.parametrize("extra", [(), NAMESPACED], ids=["cluster-wide", "namespaced"])
def test_lint_passes_strictly(helm_bin, extra):
    proc = run_helm(helm_bin, "lint", "--strict", str(CHART), *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


def test_default_is_one_cluster_wide_role_with_exactly_the_operators_grants(helm_bin):
    docs = render(helm_bin)
    assert {d["kind"] for d in docs} == {
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
        "Deployment", "Service"}
    assert grants(rules_of(docs, "ClusterRole")) == RUN_GRANTS | CRD_GRANTS
    assert run_roles(docs) == []
    assert signing_role(docs)["rules"] == SIGNING_RULES
    assert release_role(docs, LEASE)["rules"] == LEASE_RULES
    binding = by_kind(docs, "ClusterRoleBinding")[0]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "grpo-operator", "namespace": "grpo-system"}]
    env = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert "WATCH_NAMESPACES" not in {e["name"] for e in env}


def test_namespaced_grants_stay_in_the_listed_namespaces(helm_bin):
    docs = render(helm_bin, *NAMESPACED)
    roles = run_roles(docs)
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        assert grants(role["rules"]) == RUN_GRANTS
    assert sorted(b["metadata"]["namespace"] for b in by_kind(docs, "RoleBinding")
                  if b["metadata"]["name"] not in RELEASE_ROLES) == ["team-a", "team-b"]
    assert signing_role(docs)["rules"] == SIGNING_RULES
    # Cluster-wide, only kopf's discovery: the CRD and the namespaces, read-only.
    assert grants(rules_of(docs, "ClusterRole")) == CRD_GRANTS | {
        ("", "namespaces", "list"), ("", "namespaces", "watch")}
    container = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "WATCH_NAMESPACES", "value": "team-a,team-b"} in container["env"]


@pytest.mark.parametrize("extra", [(), NAMESPACED], ids=["cluster-wide", "namespaced"])
def test_no_wildcards_and_secrets_are_only_created_and_read_by_name(helm_bin, extra):
    docs = render(helm_bin, *extra)
    rules = rules_of(docs, "ClusterRole") + rules_of(docs, "Role")
    for rule in rules:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule
    unnamed = [rule for rule in rules if not rule.get("resourceNames")]
    assert {v for g, r, v in grants(unnamed) if r == "secrets"} == {"create", "get"}
    named = [rule for rule in rules if rule.get("resourceNames")]
    assert named == [SIGNING_RULES[0], LEASE_RULES[0]]


def test_the_signing_secret_follows_the_fullname(helm_bin):
    role = signing_role(render(helm_bin))
    assert role["rules"][0]["resourceNames"] == [SIGNING]
    [renamed] = [r for r in by_kind(render(helm_bin, "--set", "fullnameOverride=grpo"), "Role")
                 if r["metadata"]["name"] == "grpo-report-signing"]
    assert renamed["rules"][0]["resourceNames"] == ["grpo-report-signing"]


def test_the_deployments_pods_are_hardened_and_probed_by_kopf(helm_bin):
    deployment = by_kind(render(helm_bin), "Deployment")[0]
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container["args"][:2] == ["--liveness", "http://0.0.0.0:8080/healthz"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "probe"}
    assert {"name": "probe", "containerPort": 8080, "protocol": "TCP"} in container["ports"]


def test_values_reach_the_pod(helm_bin):
    pod = by_kind(render(
        helm_bin, "--set", "image.repository=registry.example.com/grpo-operator",
        "--set", "image.digest=sha256:" + "a" * 64, "--set", "imagePullSecrets[0].name=regcred",
        "--set", "nodeSelector.pool=system", "--set", "tolerations[0].key=dedicated",
        "--set", "tolerations[0].operator=Exists", "--set", "resources.limits.cpu=1",
    ), "Deployment")[0]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "registry.example.com/grpo-operator@sha256:" + "a" * 64
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["nodeSelector"] == {"pool": "system"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert pod["containers"][0]["resources"]["limits"] == {"cpu": 1, "memory": "512Mi"}


def test_metrics_are_served_by_default_and_can_be_turned_off(helm_bin):
    default = render(helm_bin)
    assert [s["metadata"]["name"] for s in by_kind(default, "Service")] == [
        "grpo-operator-metrics"]
    off = render(helm_bin, "--set", "metrics.enabled=false")
    assert not by_kind(off, "Service")
    env = by_kind(off, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert "GRPO_METRICS_PORT" not in {e["name"] for e in env}
    docs = render(helm_bin, "--set", "metrics.enabled=true", "--set", "metrics.port=9191",
                  "--set", "metrics.serviceMonitor.enabled=true")
    (service,) = by_kind(docs, "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    container = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "metrics", "containerPort": 9191, "protocol": "TCP"} in container["ports"]
    assert {"name": "GRPO_METRICS_PORT", "value": "9191"} in container["env"]
    (monitor,) = by_kind(docs, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"][
        "labels"].items()


def test_host_path_prefixes_reach_the_operator_only_when_set(helm_bin):
    def env_of(*args: str) -> dict:
        container = by_kind(render(helm_bin, *args), "Deployment")[0]["spec"]["template"][
            "spec"]["containers"][0]
        return {e["name"]: e.get("value") for e in container["env"]}

    assert "GRPO_HOSTPATH_PREFIXES" not in env_of()  # the operator then refuses every hostPath
    env = env_of("--set", "hostPathPrefixes={/mnt/grpo,/srv/data/}")
    assert env["GRPO_HOSTPATH_PREFIXES"] == "/mnt/grpo,/srv/data/"


@pytest.mark.parametrize("prefix", ["mnt/grpo", "/mnt/../etc", "/mnt/./grpo", "/a//b", ""])
def test_the_schema_refuses_a_host_path_prefix_that_is_not_a_plain_absolute_path(helm_bin,
                                                                                 prefix):
    proc = run_helm(helm_bin, "template", "x", str(CHART), "--set-json",
                    f'hostPathPrefixes=["{prefix}"]')
    assert proc.returncode != 0
    assert "at '/hostPathPrefixes/0'" in proc.stderr, proc.stderr


def test_a_service_monitor_without_metrics_is_refused(helm_bin):
    proc = run_helm(helm_bin, "template", "x", str(CHART), "--set", "metrics.enabled=false",
                    "--set", "metrics.serviceMonitor.enabled=true")
    assert proc.returncode != 0
    assert "metrics.serviceMonitor.enabled needs metrics.enabled" in proc.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("--set", "replicas=6"), "at '/replicas': maximum: got 6, want 5"),
    (("--set", "image.pullPolicy=Sometimes"),
     "at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'"),
    (("--set", "watchNamespaces={Team_A}"), "at '/watchNamespaces/0': 'Team_A' does not match"),
    (("--set", "probe.port=80"), "at '/probe/port': minimum: got 80, want 1,024"),
    (("--set", "watchNamespace=team-a"), "additional properties 'watchNamespace' not allowed"),
], ids=["replicas", "pullPolicy", "namespace-name", "privileged-port", "misspelt-key"])
def test_the_schema_refuses_bad_values_with_a_clear_message(helm_bin, args, message):
    for command in ("lint", "template"):
        proc = run_helm(helm_bin, command, *(["x"] if command == "template" else []),
                        str(CHART), *args)
        assert proc.returncode != 0, command
        assert message in proc.stdout + proc.stderr, (command, proc.stdout + proc.stderr)


def test_the_chart_ships_the_generated_crd(helm_bin):
    assert (REPO / CHART_CRD_PATH).read_text() == (REPO / CRD_PATH).read_text()
    proc = run_helm(helm_bin, "show", "crds", str(CHART))
    assert proc.returncode == 0, proc.stderr
    (crd,) = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert crd["metadata"]["name"] == "grporuns.grpo.dev"


def test_the_generator_keeps_the_charts_crd_in_step(tmp_path, capsys):
    for rel in (CRD_PATH, DOCS_PATH, CHART_CRD_PATH, CHART_DIR / "Chart.yaml"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    assert generate(["--check", "--root", str(tmp_path)]) == 0
    (tmp_path / CHART_CRD_PATH).write_text("edited by hand\n")
    assert generate(["--check", "--root", str(tmp_path)]) == 1
    assert str(CHART_CRD_PATH) in capsys.readouterr().err
    assert generate(["--root", str(tmp_path)]) == 0
    assert (tmp_path / CHART_CRD_PATH).read_text() == (REPO / CRD_PATH).read_text()


def test_allowed_images_add_an_admission_policy_only_when_set(helm_bin):
    assert not by_kind(render(helm_bin), "ValidatingAdmissionPolicy")
    docs = render(helm_bin, "--set-json", 'allowedImages=["registry.example.com/ml/"]')
    (policy,) = by_kind(docs, "ValidatingAdmissionPolicy")
    (binding,) = by_kind(docs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert "matchResources" not in binding["spec"]  # cluster-wide, as the release serves
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert {"name": "allowed", "expression": '["registry.example.com/ml/"]'} in (
        policy["spec"]["variables"])
    namespaced = by_kind(render(helm_bin, "--set-json", 'allowedImages=["a/"]', *NAMESPACED),
                         "ValidatingAdmissionPolicyBinding")[0]
    (selector,) = namespaced["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert selector["values"] == ["team-a", "team-b"]


def test_two_replicas_elect_a_leader_through_the_lease_by_default(helm_bin):
    deployment = by_kind(render(helm_bin), "Deployment")[0]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GRPO_LEADER_ELECTION"]["value"] == "true"
    assert env["GRPO_LEASE_NAME"]["value"] == LEASE
    assert env["GRPO_LEASE_SECONDS"]["value"] == "15"
    assert env["GRPO_IDENTITY"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}

    alone = render(helm_bin, "--set", "replicas=1", "--set", "leaderElection.enabled=false")
    deployment = by_kind(alone, "Deployment")[0]
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert LEASE not in {r["metadata"]["name"] for r in by_kind(alone, "Role")}
    proc = run_helm(helm_bin, "template", "x", str(CHART), "--set", "replicas=2",
                    "--set", "leaderElection.enabled=false")
    assert proc.returncode != 0
    assert "replicas > 1 needs leaderElection.enabled" in proc.stderr

