"""The pydantic models: examples parse, invalid manifests are refused naming the field, the
transition rules, and the wire format."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from grpo_operator.api.report import describe_validation_error
from grpo_operator.api.spec import GRPORunSpec, validate_manifest, validate_spec_update
from grpo_operator.api.training import LossAggregation
from tests.operator.api.manifests import INVALID, base_manifest, set_path

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.yaml"))


def test_there_are_examples():
    assert {p.name for p in EXAMPLES} >= {"tiny-cpu.yaml", "gsm8k-gpu.yaml"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_parses(path):
    run = validate_manifest(yaml.safe_load(path.read_text()))
    assert run.spec.algorithm.max_steps >= 1


def test_tiny_cpu_example_is_a_cpu_run_the_demo_can_afford():
    spec = validate_manifest(yaml.safe_load((EXAMPLES[0].parent / "tiny-cpu.yaml").read_text()))
    assert spec.spec.resources.gpus_per_worker == 0
    assert spec.spec.algorithm.group_size == 4
    assert spec.spec.algorithm.max_steps <= 5


def test_defaults_fill_in():
    spec = validate_manifest(base_manifest()).spec
    assert spec.algorithm.loss_aggregation is LossAggregation.TOKEN_MEAN
    assert spec.algorithm.clip_ratio_c == 3.0
    assert spec.rollout.tensor_parallel_size == 1
    assert spec.run_policy.max_restarts == 3
    assert spec.resources.head.memory == "8Gi"
    assert spec.budget.stop_at_limit is False


@pytest.mark.parametrize("case", INVALID, ids=lambda c: c.id)
def test_invalid_manifest_is_refused_naming_the_field(case):
    with pytest.raises(ValidationError) as refused:
        validate_manifest(case.manifest())
    assert case.field in describe_validation_error(refused.value)


def test_the_invalid_table_is_large_and_its_ids_unique():
    assert len(INVALID) >= 30
    assert len({c.id for c in INVALID}) == len(INVALID)


def test_wire_names_are_camel_case_with_kubernetes_acronyms():
    wire = validate_manifest(
        set_path(base_manifest(), "spec.budget", {"maxGPUHours": 2.5})
    ).spec.to_wire()
    assert wire["budget"]["maxGPUHours"] == 2.5
    assert wire["resources"]["gpusPerWorker"] == 4
    assert "terminationGracePeriodSeconds" in wire["resources"]
    assert "runPolicy" in wire and "run_policy" not in wire


def test_null_means_unset_as_on_the_api_server():
    manifest = set_path(base_manifest(), "spec.algorithm.groupSize", None)
    assert validate_manifest(manifest).spec.algorithm.group_size == 8


def test_integer_quantities_become_strings():
    manifest = set_path(base_manifest(), "spec.resources.worker", {"cpu": 4, "memory": "8Gi"})
    assert validate_manifest(manifest).spec.resources.worker.cpu == "4"


def test_reward_options_are_the_camel_case_keys_the_trainer_takes():
    manifest = set_path(
        base_manifest(), "spec.reward", {"name": "exact_match", "caseSensitive": False}
    )
    reward = validate_manifest(manifest).spec.reward
    assert (reward.name.value, reward.options()) == ("exact_match", {"caseSensitive": False})
    regex = validate_manifest(
        set_path(
            base_manifest(),
            "spec.reward",
            {"name": "regex", "pattern": r"=\s*(?P<num>-?\d+)", "group": "num"},
        )
    ).spec.reward
    assert regex.options() == {"pattern": r"=\s*(?P<num>-?\d+)", "group": "num"}


def _spec(manifest) -> GRPORunSpec:
    return validate_manifest(manifest).spec


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("spec.model.sha256", None, "model is immutable"),
        ("spec.model.path", "other", "model is immutable"),
        ("spec.dataset.validationFile", None, "dataset is immutable"),
        ("spec.reward.name", "math_boxed", "reward is immutable"),
        ("spec.algorithm.groupSize", 8, "algorithm.groupSize is immutable"),
        ("spec.algorithm.maxSteps", 9, "algorithm.maxSteps may only be raised"),
        ("spec.algorithm.miniBatchSize", 16, "algorithm.miniBatchSize is immutable"),
        ("spec.checkpoint.volume", {"hostPath": {"path": "/c"}}, "checkpoint.volume is immutable"),
        ("spec.runPolicy.queueName", "q", "runPolicy.queueName is immutable"),
    ],
)
def test_frozen_changes_are_refused(path, value, message):
    old = base_manifest()
    assert validate_spec_update(_spec(old), _spec(set_path(old, path, value))) == [message]


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("spec.algorithm.maxSteps", 50),
        ("spec.runPolicy.suspend", True),
        ("spec.runPolicy.cancel", True),
        ("spec.runPolicy.maxRestarts", 0),
        ("spec.budget.maxGeneratedTokens", 1000),
        ("spec.runPolicy.ttlSecondsAfterFinished", 60),
        ("spec.resources.workers", 1),
    ],
)
def test_editable_changes_are_allowed(path, value):
    old = base_manifest()
    assert validate_spec_update(_spec(old), _spec(set_path(old, path, value))) == []


def test_cancel_cannot_be_undone():
    cancelled = set_path(base_manifest(), "spec.runPolicy.cancel", True)
    undone = set_path(cancelled, "spec.runPolicy.cancel", False)
    assert validate_spec_update(_spec(cancelled), _spec(undone)) == [
        "runPolicy.cancel cannot be undone"
    ]


def test_every_algorithm_field_but_max_steps_is_frozen():
    frozen = {p for r in GRPORunSpec.TRANSITION_RULES for p in r.frozen}
    algorithm = {
        f"algorithm.{f.alias}"
        for f in GRPORunSpec.model_fields["algorithm"].annotation.model_fields.values()
    }
    assert algorithm - frozen == {"algorithm.maxSteps"}
    assert {"model", "dataset", "reward"} <= frozen


def test_an_integral_number_is_an_integer_as_on_the_api_server():
    manifest = set_path(base_manifest(), "spec.algorithm.groupSize", 4.0)
    assert validate_manifest(manifest).spec.algorithm.group_size == 4
    with pytest.raises(ValidationError, match="groupSize"):
        validate_manifest(set_path(base_manifest(), "spec.algorithm.groupSize", 4.5))


def test_the_parity_guards_limit_follows_the_dtype_and_steps_aside_for_top_p():
    from grpo_operator.api.training import RolloutSpec

    assert RolloutSpec(dtype="float32").logprob_mismatch_limit(1.0) == 1e-3
    assert RolloutSpec(dtype="bfloat16").logprob_mismatch_limit(1.0) == 0.1
    assert RolloutSpec(dtype="float32").logprob_mismatch_limit(0.9) is None
    assert RolloutSpec(max_logprob_mismatch=0.5).logprob_mismatch_limit(0.9) == 0.5
    # a bfloat16 learner is held to bfloat16's bound, even against a float32 engine
    assert RolloutSpec(dtype="float32").logprob_mismatch_limit(1.0, "bfloat16") == 0.1
