"""The generated CRD on a real API server: accepted, examples admitted with the models'
defaults, invalid manifests refused naming the field, and agreement with the models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from grpo_operator.api.constants import CRD_NAME
from grpo_operator.api.report import describe_validation_error
from grpo_operator.api.spec import GRPORunSpec, validate_manifest
from tests.operator.api.manifests import DELETE, INVALID, base_manifest, set_path
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.yaml"))


def test_the_crd_is_established_and_structural(cluster, grporun_crd):
    crd = json.loads(cluster.kubectl("get", "crd", CRD_NAME, "-o", "json").stdout)
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions["Established"] == "True"
    assert conditions["NamesAccepted"] == "True"
    assert conditions.get("NonStructuralSchema", "False") == "False"
    assert crd["spec"]["names"]["shortNames"] == ["grpo"]

    # The published OpenAPI (what `kubectl explain` reads) carries the models' descriptions;
    # the API server publishes it a moment after the CRD is established.
    def explained():
        proc = cluster.kubectl("explain", "grporuns.spec.algorithm.groupSize", check=False)
        return proc.returncode == 0 and proc.stdout

    assert "Completions sampled per prompt" in wait_for(explained, 30, what="kubectl explain")


def _without_empty(value):
    if isinstance(value, dict):
        return {k: _without_empty(v) for k, v in value.items() if v not in ({}, [])}
    return value


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_accepted_and_reads_back_with_the_models_defaults(cluster, runs, path):
    applied = cluster.kubectl(
        "apply", "--server-side", "--validate=strict", "-n", runs.namespace, "-f", str(path)
    )
    assert "serverside-applied" in applied.stdout
    manifest = yaml.safe_load(path.read_text())
    stored = runs.get(manifest["metadata"]["name"])["spec"]
    expected = validate_manifest(manifest).spec
    # The API server filled in exactly the defaults the models fill in.
    assert GRPORunSpec.model_validate(stored) == expected
    assert stored == _without_empty(expected.to_wire())
    assert stored["algorithm"]["clipRatioC"] == 3.0
    assert stored["runPolicy"]["suspend"] is False
    assert "dtype" in stored["rollout"]


@pytest.mark.parametrize("case", INVALID, ids=lambda c: c.id)
def test_invalid_manifest_is_refused_by_the_api_server_naming_the_field(runs, case):
    refused = runs.create(case.manifest(), dry_run=True)
    assert not refused.accepted
    assert refused.status in (400, 422), refused.message
    assert case.field in refused.message


@pytest.mark.parametrize("case_id", ["mini-batch-not-dividing", "unknown-field", "name-too-long"])
def test_kubectl_apply_refuses_with_the_field_named(cluster, runs, case_id):
    case = next(c for c in INVALID if c.id == case_id)
    proc = cluster.kubectl(
        "apply",
        "--server-side",
        "--validate=strict",
        "-n",
        runs.namespace,
        "-f",
        "-",
        input=yaml.safe_dump(case.manifest(f"k-{case_id}"[:40])),
        check=False,
    )
    assert proc.returncode != 0
    assert case.field in proc.stderr


# Values near each bound and rule, valid and invalid; the property below mixes a few of them.
BOUNDARIES: list[tuple[str, list]] = [
    ("metadata.name", ["a", "r" * 40, "r" * 41, "1abc", "ab-", "a-b"]),
    ("spec.algorithm.groupSize", [1, 2, 3, 4, 1024, 1025, "4", 4.0]),
    ("spec.algorithm.promptsPerStep", [0, 1, 3, 8, 65536, 65537]),
    ("spec.algorithm.miniBatchSize", [0, 1, 4, 6, 8, 16, 32, DELETE]),
    ("spec.algorithm.microBatchSize", [0, 1, 2, 3, 4, DELETE]),
    ("spec.algorithm.learningRate", [0, 1e-12, 1, 1.0000001, -1e-6, 1]),
    ("spec.algorithm.clipRatioLow", [0, 1e-9, 0.5, 0.999999, 1, 1.5]),
    ("spec.algorithm.clipRatioC", [1, 1.0000001, 3, 100, 100.5]),
    ("spec.algorithm.temperature", [0, 0.01, 10, 10.01, "1.0"]),
    ("spec.algorithm.topP", [0, 0.5, 1, 1.01]),
    ("spec.algorithm.maxPromptTokens", [0, 1, 512]),
    ("spec.algorithm.maxResponseTokens", [0, 1, 1024]),
    ("spec.algorithm.evalIntervalSteps", [0, 1, DELETE]),
    ("spec.dataset.validationFile", [DELETE, "gsm8k/train.parquet", "v.parquet", "v.csv"]),
    ("spec.rollout.tensorParallelSize", [0, 1, 2, 3, 4, 8]),
    ("spec.resources.gpusPerWorker", [-1, 0, 1, 4, 6, 16, 17]),
    ("spec.rollout.maxModelLen", [1, 2, 1535, 1536, DELETE]),
    (
        "spec.reward",
        [
            {"name": "gsm8k"},
            {"name": "regex", "pattern": r"(?P<answer>\d+)"},
            {"name": "regex", "pattern": r"(?P<n>\d+)", "group": "n"},
            {"name": "regex", "pattern": r"(\d+)"},
            {"name": "exact_match", "caseSensitive": True, "strip": False},
            {"name": "math_boxed", "strip": True},
            {"name": "regex", "pattern": r"(?P<answer>\d+)", "strip": True},
        ],
    ),
    ("spec.resources.worker.cpu", ["1", 2, "500m", "-1", "1.5", "abc", -3]),
    ("spec.checkpoint.keep", [0, 1, 1000, 1001]),
    ("spec.runPolicy.maxRestarts", [-1, 0, 1000, 1001]),
    ("spec.runPolicy.suspend", [True, False, "true"]),
    ("spec.model.path", ["a/b", "../a", "a/./b", "/abs", "a//b", DELETE]),
    ("spec.budget.maxGPUHours", [0, 0.001, 1e7, 1.1e7]),
    ("spec.resources.nodeSelector", [{"pool": "gpu"}, {"pool": "x" * 64}]),
    (
        "spec.resources.env",
        [
            [{"name": name, "value": "1"}]
            for name in ("RAY_AUTH_MODE", "KUBERAY_X", "GRPO_RUN_CONFIG", "GRPO_TEST_DROP_WEIGHT",
                         "NVIDIA_VISIBLE_DEVICES", "FQ_RAY_IP", "VLLM_USE_V1", "MY_RAY_FLAG")
        ]
        + [
            [{"name": "T", "valueFrom": {"secretKeyRef": {"name": secret, "key": "k"}}}]
            for secret in ("a-ray-auth", "a-report-key", "wandb", "ray-auth-x")
        ],
    ),
    ("spec.resources.imagePullSecrets", [[{"name": "a-report-key"}], [{"name": "regcred"}]]),
    (
        "spec.resources.extraResources",
        [{"nvidia.com/gpu": 1}, {"nvidia.com/mig-1g.10gb": 1}, {"gpu.intel.com/xe": 1},
         {"cpu": 1}, {"rdma/hca": 1}, {"example.com/gpus": 2}, {"hugepages-2Mi": "1Gi"}],
    ),
    ("spec.resources.gpuResourceName", ["nvidia.com/gpu", "amd.com/gpu", "memory", "rdma/hca"]),
]

_change = st.one_of(
    [st.tuples(st.just(path), st.sampled_from(values)) for path, values in BOUNDARIES]
)


def _model_verdict(manifest) -> tuple[bool, str]:
    try:
        validate_manifest(manifest)
    except ValidationError as exc:
        return False, describe_validation_error(exc)
    return True, ""


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    database=None,
)
@given(changes=st.lists(_change, min_size=1, max_size=3))
def test_models_and_api_server_accept_and_refuse_the_same_manifests(runs, changes):
    manifest = base_manifest("agree")
    for path, value in changes:
        manifest = set_path(manifest, path, value)
    model_ok, model_says = _model_verdict(manifest)
    server = runs.create(manifest, dry_run=True)
    assert model_ok == server.accepted, (changes, model_says, server.message)


@pytest.mark.parametrize(("path", "value", "where"), [
    ("spec.resources.env", [{"name": "RAY_AUTH_MODE", "value": "disabled"}],
     "spec.resources.env[0].name"),
    ("spec.resources.env",
     [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "other-ray-auth", "key": "k"}}}],
     "spec.resources.env[0].valueFrom.secretKeyRef.name"),
    ("spec.resources.extraResources", {"nvidia.com/gpu": 8}, "spec.resources.extraResources"),
], ids=["ray-auth-mode", "other-runs-token", "unmetered-gpus"])
def test_a_spec_reaching_past_its_run_is_refused_at_create(runs, path, value, where):
    """Not a dry run: the create itself is refused, naming the field, and nothing is stored."""
    manifest = set_path(set_path(base_manifest("reach"), path, value),
                        "spec.resources.gpusPerWorker", 0)
    refused = runs.create(manifest)
    assert not refused.accepted and refused.status == 422, refused.message
    assert where in refused.message
    assert ("reserved" in refused.message) or ("GPUs come only from gpusPerWorker"
                                               in refused.message)
    assert runs.create(set_path(manifest, path, DELETE), dry_run=True).accepted
