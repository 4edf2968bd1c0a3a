"""Updates on a real API server: frozen inputs stay frozen (removal included), editable fields
change, and spec and status are written through separate endpoints."""

from __future__ import annotations

import itertools

import pytest
import yaml

from grpo_operator.api.spec import validate_manifest, validate_spec_update
from tests.operator.api.manifests import base_manifest, set_path

pytestmark = pytest.mark.cluster

_names = (f"upd-{n}" for n in itertools.count())


def _manifest(name: str) -> dict:
    manifest = base_manifest(name)
    manifest["spec"]["algorithm"]["miniBatchSize"] = 8
    manifest["spec"]["runPolicy"] = {"queueName": "team-a"}
    return manifest


@pytest.fixture
def run(runs) -> dict:
    """A stored GRPORun, created for the test."""
    created = runs.create(_manifest(next(_names)))
    assert created.accepted, created.message
    return created.body


def _models_say(old_spec: dict, patch: dict) -> list[str]:
    """What the models say about applying a merge patch of spec to `old_spec`."""
    new = {"spec": old_spec}
    for path, value in _flatten(patch):
        new = set_path(new, f"spec.{path}", value)
    old_model = validate_manifest({"metadata": {"name": "x"}, "spec": old_spec}).spec
    new_model = validate_manifest({"metadata": {"name": "x"}, "spec": new["spec"]}).spec
    return validate_spec_update(old_model, new_model)


def _flatten(patch: dict, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for key, value in patch.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out += _flatten(value, path + ".")
        else:
            out.append((path, value))
    return out


FROZEN = [
    ({"model": {"path": "other"}}, "model is immutable"),
    ({"model": {"sha256": None}}, "model is immutable"),  # removing an optional frozen field
    (
        {"model": {"volume": {"persistentVolumeClaim": {"claimName": "other"}}}},
        "model is immutable",
    ),
    ({"dataset": {"validationFile": None}}, "dataset is immutable"),
    ({"dataset": {"sha256": "b" * 64}}, "dataset is immutable"),  # adding one is a change too
    ({"reward": {"name": "math_boxed"}}, "reward is immutable"),
    ({"algorithm": {"groupSize": 8}}, "algorithm.groupSize is immutable"),
    ({"algorithm": {"learningRate": 2e-6}}, "algorithm.learningRate is immutable"),
    ({"algorithm": {"miniBatchSize": None}}, "algorithm.miniBatchSize is immutable"),
    ({"algorithm": {"seed": 7}}, "algorithm.seed is immutable"),
    ({"algorithm": {"maxSteps": 9}}, "algorithm.maxSteps may only be raised"),
    (
        {"checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "c2"}}}},
        "checkpoint.volume is immutable",
    ),
    ({"runPolicy": {"queueName": None}}, "runPolicy.queueName is immutable"),
]


@pytest.mark.parametrize(("patch", "message"), FROZEN, ids=[m for _, m in FROZEN])
def test_changing_a_frozen_input_is_refused(runs, run, patch, message):
    refused = runs.patch(run["metadata"]["name"], {"spec": patch})
    assert not refused.accepted
    assert refused.status == 422
    assert message in refused.message
    assert message in _models_say(run["spec"], patch)
    assert runs.get(run["metadata"]["name"])["spec"] == run["spec"]


EDITABLE = [
    {"algorithm": {"maxSteps": 500}},
    {"runPolicy": {"suspend": True}},
    {"runPolicy": {"cancel": True}},
    {"runPolicy": {"maxRestarts": 0}},
    {"runPolicy": {"ttlSecondsAfterFinished": 600}},
    {"budget": {"maxGeneratedTokens": 10_000, "maxGPUHours": 1.5, "stopAtLimit": True}},
    {"checkpoint": {"intervalSteps": 5, "keep": 4}},
    {"resources": {"workers": 1}},
]


@pytest.mark.parametrize("patch", EDITABLE, ids=[_flatten(p)[0][0] for p in EDITABLE])
def test_editable_fields_change(runs, run, patch):
    changed = runs.patch(run["metadata"]["name"], {"spec": patch})
    assert changed.accepted, changed.message
    assert _models_say(run["spec"], patch) == []
    for path, value in _flatten(patch):
        node = changed.body["spec"]
        for key in path.split("."):
            node = node[key]
        assert node == value
    assert changed.body["metadata"]["generation"] == run["metadata"]["generation"] + 1


def test_cancel_cannot_be_undone(runs, run):
    name = run["metadata"]["name"]
    assert runs.patch(name, {"spec": {"runPolicy": {"cancel": True}}}).accepted
    refused = runs.patch(name, {"spec": {"runPolicy": {"cancel": False}}})
    assert not refused.accepted
    assert "runPolicy.cancel cannot be undone" in refused.message


def test_server_side_apply_dropping_a_frozen_field_is_refused(cluster, runs):
    """The GitOps path: a manifest re-applied without model.sha256 would remove it."""
    manifest = _manifest("ssa-frozen")
    apply = ("apply", "--server-side", "--validate=strict", "-n", runs.namespace, "-f", "-")
    cluster.kubectl(*apply, input=yaml.safe_dump(manifest))
    del manifest["spec"]["model"]["sha256"]
    proc = cluster.kubectl(*apply, input=yaml.safe_dump(manifest), check=False)
    assert proc.returncode != 0
    assert "model is immutable" in proc.stderr
    manifest["spec"]["model"]["sha256"] = "a" * 64
    manifest["spec"]["algorithm"]["maxSteps"] = 20
    cluster.kubectl(*apply, input=yaml.safe_dump(manifest))
    assert runs.get("ssa-frozen")["spec"]["algorithm"]["maxSteps"] == 20


STATUS = {
    "observedGeneration": 1,
    "phase": "Running",
    "conditions": [
        {
            "type": "Accepted",
            "status": "True",
            "reason": "Accepted",
            "message": "",
            "lastTransitionTime": "2025-01-01T00:00:00Z",
            "observedGeneration": 1,
        },
    ],
    "ledger": {"plannedSteps": 10, "completedSteps": 3, "rewardMean": 0.5},
    "recovery": {"attempt": 1, "restarts": 0},
    "seenRetryIds": ["op-1"],
}


def test_status_goes_through_the_subresource_only(runs, run):
    name = run["metadata"]["name"]
    # Through the status subresource: status changes, a spec change in the same body does not.
    written = runs.patch_status(name, {"status": STATUS, "spec": {"algorithm": {"maxSteps": 99}}})
    assert written.accepted, written.message
    stored = runs.get(name)
    assert stored["spec"] == run["spec"]
    assert stored["metadata"]["generation"] == run["metadata"]["generation"]
    assert stored["status"]["phase"] == "Running"
    assert stored["status"]["ledger"]["completedSteps"] == 3
    # Nested defaults of status sections are filled in too.
    assert stored["status"]["recovery"]["rollout"]["reusedGroups"] == 0
    # Through the main resource: spec changes, status in the same body does not.
    changed = runs.patch(
        name, {"spec": {"algorithm": {"maxSteps": 99}}, "status": {"phase": "Failed"}}
    )
    assert changed.accepted, changed.message
    stored = runs.get(name)
    assert stored["spec"]["algorithm"]["maxSteps"] == 99
    assert stored["status"]["phase"] == "Running"


@pytest.mark.parametrize(
    ("status", "field"),
    [
        ({"phase": "Exploded"}, "phase"),
        ({"ledger": {"plannedSteps": 2, "completedSteps": 3}}, "completedSteps"),
        (
            {
                "terminal": {
                    "outcome": "Succeeded",
                    "reason": "Completed",
                    "finishedTime": "2025-01-01T00:00:00Z",
                }
            },
            "terminal.artifact",
        ),
        (
            {
                "recovery": {
                    "history": [
                        {
                            "attempt": 0,
                            "reason": "Started",
                            "time": "2025-01-01T00:00:00Z",
                            "fromStep": 0,
                        }
                    ]
                }
            },
            "attempt",
        ),
        ({"seenRetryIds": [f"op-{i}" for i in range(17)]}, "seenRetryIds"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_an_invalid_status_is_refused(runs, run, status, field):
    refused = runs.patch_status(run["metadata"]["name"], {"status": status})
    assert not refused.accepted
    assert field in refused.message
