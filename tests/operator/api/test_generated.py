"""The generated CRD and API docs: checked in up to date, structural, and complete."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from grpo_operator.api.base import QUANTITY_PATTERN
from grpo_operator.api.constants import MAX_RUN_NAME_LENGTH, NAME_BUDGET
from grpo_operator.api.crd import build_crd
from grpo_operator.api.docs import render_api_docs
from grpo_operator.api.generate import CRD_PATH, DOCS_PATH, main

REPO = Path(__file__).resolve().parents[3]


def test_checked_in_files_are_up_to_date():
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_operator.api.generate", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


def test_check_names_the_file_that_differs(tmp_path, capsys):
    for rel in (CRD_PATH, DOCS_PATH):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    assert main(["--check", "--root", str(tmp_path)]) == 0
    (tmp_path / DOCS_PATH).write_text("edited by hand\n")
    assert main(["--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert str(DOCS_PATH) in err and str(CRD_PATH) not in err
    assert main(["--root", str(tmp_path)]) == 0
    assert main(["--check", "--root", str(tmp_path)]) == 0


def _walk(schema, path="$"):
    yield path, schema
    for name, prop in schema.get("properties", {}).items():
        yield from _walk(prop, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{path}.*")


def _root():
    return build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_schema_has_no_json_schema_only_constructs():
    for path, node in _walk(_root()):
        assert not {"$ref", "$defs", "title", "const", "oneOf", "allOf"} & node.keys(), path
        assert "nullable" not in node, path
        assert not ("properties" in node and "additionalProperties" in node), path
        for key in ("exclusiveMinimum", "exclusiveMaximum"):
            assert node.get(key, True) is True, path
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string") is True, path
        else:
            assert "type" in node, path


def test_every_spec_string_and_list_is_bounded_for_cel_cost():
    for path, node in _walk(_root()["properties"]["spec"]):
        if node.get("type") == "string":
            assert "maxLength" in node or "enum" in node, path
        if node.get("type") == "array":
            assert "maxItems" in node, path
        if node.get("type") == "object" and "additionalProperties" in node:
            assert "maxProperties" in node, path


def test_quantities_are_int_or_string_with_the_quantity_pattern():
    worker = _root()["properties"]["spec"]["properties"]["resources"]["properties"]["worker"]
    for name in ("cpu", "memory"):
        node = worker["properties"][name]
        assert node["x-kubernetes-int-or-string"] is True
        assert node["pattern"] == QUANTITY_PATTERN
        assert node["minimum"] == 0


def test_nested_sections_default_so_their_fields_default():
    spec = _root()["properties"]["spec"]["properties"]
    for section in ("rollout", "budget", "runPolicy"):
        assert spec[section]["default"] == {}, section
    assert spec["resources"]["properties"]["head"]["default"] == {"cpu": "2", "memory": "8Gi"}


def test_crd_yaml_parses_to_the_built_crd():
    text = (REPO / CRD_PATH).read_text()
    assert yaml.safe_load(text) == build_crd()


def test_docs_cover_every_field_with_mutability():
    docs = render_api_docs()
    root = _root()
    for top in ("spec", "status"):
        for path, node in _walk(root["properties"][top], top):
            if "properties" not in node:
                continue
            assert f"### `{path}`" in docs, path
            for name in node["properties"]:
                assert f"| `{name}` |" in docs, f"{path}.{name}"
    assert "| `groupSize` | integer | `8` | 2 ≤ x; x ≤ 1024 | frozen |" in docs
    assert "| may only be raised |" in docs
    assert "may be set to true, not back" in docs


def test_name_budget_fits_and_is_documented():
    for what, _, total, limit, _ in NAME_BUDGET:
        assert total <= limit, what
    assert f"at most {MAX_RUN_NAME_LENGTH} characters" in render_api_docs()
