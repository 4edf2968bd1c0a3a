"""The operator/image contract version: the rule, and the run config an older image can read."""

from __future__ import annotations

import json

import pytest

from grpo_operator.api.contract import (
    CONTRACT_VERSION,
    HISTORY,
    ContractVersion,
    image_refuses,
    operator_refuses,
    peek_version,
)
from grpo_operator.api.run_config import (
    IncompatibleContractError,
    ResumeMode,
    RunConfig,
    RunConfigError,
)
from grpo_operator.api.spec import GRPORunSpec
from tests.operator.api.manifests import base_manifest

V = ContractVersion.parse


def config(**spec_changes) -> RunConfig:
    body = base_manifest()["spec"]
    for section, values in spec_changes.items():
        body[section] = {**body.get(section, {}), **values}
    return RunConfig.build(spec=GRPORunSpec.model_validate(body), name="r", namespace="n",
                           uid="u", attempt=1, resume=ResumeMode.NONE, report_config_map="m")


def test_versions_parse_order_and_the_newest_history_entry_is_this_codes():
    assert V("1.10") > V("1.9") > V("1.0") and str(V("2.3")) == "2.3"
    assert max(map(V, HISTORY)) == CONTRACT_VERSION
    for bad in ("1", "1.2.3", "01.1", "v1.1", 1.1, "1.-1"):
        with pytest.raises(ValueError):
            V(bad)
    assert peek_version('{"contractVersion": "1.7", "x": 1}') == V("1.7")
    assert peek_version('{"schemaVersion": 1}') == V("1.0")  # from before versions
    for bad in ('["1.1"]', "{", '{"contractVersion": 11}'):
        with pytest.raises(ValueError):
            peek_version(bad)


@pytest.mark.parametrize(("image", "operator", "refused"), [
    ("1.1", "1.1", False),
    ("1.0", "1.1", False),  # an older image: it refuses what it cannot read itself
    ("1.2", "1.1", True),   # a newer image may report what this operator cannot read
    ("2.0", "1.1", True),
    ("0.9", "1.1", True),
])
def test_the_operator_refuses_newer_minors_and_other_majors(image, operator, refused):
    refusal = operator_refuses(V(image), V(operator))
    assert (refusal is not None) == refused
    if refused:
        assert f"speaks contract {image}, this operator {operator}" in refusal


def test_the_image_refuses_other_majors_and_newer_fields_it_cannot_parse():
    assert image_refuses(V("2.0"), V("1.1")) is not None
    assert image_refuses(V("1.5"), V("1.1")) is None  # nothing it does not know: it runs
    assert "spec.learner: Extra" in image_refuses(V("1.5"), V("1.1"),
                                                    problem="spec.learner: Extra inputs")
    assert image_refuses(V("1.1"), V("1.1"), problem="spec.x: bad") is None  # just invalid


def test_the_spec_goes_without_its_defaults_so_older_images_can_read_it():
    doc = json.loads(config().to_json())
    assert doc["contractVersion"] == str(CONTRACT_VERSION)
    spec = doc["spec"]
    assert not {"learner", "budget", "runPolicy"} & set(spec), spec  # defaults left out whole
    for field in ("weightDecay", "adamBeta1", "adamBeta2", "evalSamples", "evalMaxPrompts"):
        assert field not in spec["algorithm"], field
    assert RunConfig.from_json(config().to_json()) == config()  # and read back the same
    used = json.loads(config(learner={"dtype": "bfloat16"}).to_json())["spec"]
    assert used["learner"] == {"dtype": "bfloat16"}


def test_a_newer_operators_config_runs_unless_it_uses_what_the_image_lacks():
    doc = json.loads(config().to_json())
    newer = json.dumps(doc | {"contractVersion": "1.9"})
    assert RunConfig.from_json(newer).spec == config().spec
    doc["spec"]["learner"] = {"dtype": "bfloat16", "fp8": True}  # a field of 1.9
    with pytest.raises(IncompatibleContractError, match=r"spec\.learner\.fp8.*contract 1\.9"):
        RunConfig.from_json(json.dumps(doc | {"contractVersion": "1.9"}))
    with pytest.raises(RunConfigError) as same_version:  # from this operator: plainly invalid
        RunConfig.from_json(json.dumps(doc))
    assert not isinstance(same_version.value, IncompatibleContractError)
    with pytest.raises(IncompatibleContractError, match="speaks"):
        other_major = f"{CONTRACT_VERSION.major + 1}.0"
        RunConfig.from_json(json.dumps(json.loads(config().to_json())
                                       | {"contractVersion": other_major}))
