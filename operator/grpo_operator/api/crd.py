"""The GRPORun CustomResourceDefinition, generated from the models.

Pydantic's JSON Schema is not a structural CRD schema. `to_structural` rewrites it: `$ref`s are
inlined keeping their sibling keywords (description, default), `anyOf [X, null]` becomes X (the
API server prunes nulls of non-nullable fields before defaulting, which is what the models do
with None, so "null" and "unset" agree on both sides), numeric `exclusiveMinimum/Maximum`
become booleans beside `minimum/maximum`, `const` becomes a one-value enum, open objects become
`x-kubernetes-preserve-unknown-fields`, int-or-string quantities get core/v1's shape, and
titles go.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from grpo_operator.api import constants as c
from grpo_operator.api.spec import GRPORun, GRPORunSpec
from grpo_operator.api.status import GRPORunStatus

_DROP = {"title", "$defs"}


def normalise_description(text: str) -> str:
    """Docstrings are wrapped at 100 columns; a description is one paragraph."""
    return re.sub(r"\s+", " ", text).strip()


def to_structural(model: type[BaseModel]) -> dict[str, Any]:
    """The structural CRD schema of a model (validation mode, wire names)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _convert(raw, raw.get("$defs", {}))


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline a $ref (or allOf [$ref]) and drop a null branch, keeping sibling keywords."""
    node = dict(node)
    if "allOf" in node and len(node["allOf"]) == 1:
        node.update(node.pop("allOf")[0])
    if "anyOf" in node:
        branches = [b for b in node["anyOf"] if b.get("type") != "null"]
        if len(branches) == 1:
            del node["anyOf"]
            if node.get("default", ...) is None:
                del node["default"]
            return _resolve({**branches[0], **node}, defs)
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        rules = target.get("x-kubernetes-validations", []) + node.get(
            "x-kubernetes-validations", []
        )
        merged = {**target, **node}
        if rules:
            merged["x-kubernetes-validations"] = rules
        return _resolve(merged, defs)
    return node


def _convert(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    node = _resolve(node, defs)
    out: dict[str, Any] = {}
    if "description" in node:
        out["description"] = normalise_description(node["description"])
    if node.get("x-kubernetes-int-or-string"):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        out["x-kubernetes-int-or-string"] = True
        out["minimum"] = 0
    elif "type" in node:
        out["type"] = node["type"]
    if "const" in node:
        out["enum"] = [node["const"]]
    for key, value in node.items():
        if key in _DROP or key in out or key in ("const", "type", "x-kubernetes-int-or-string"):
            continue
        if key == "properties":
            out[key] = {name: _convert(prop, defs) for name, prop in value.items()}
        elif key == "items":
            out[key] = _convert(value, defs)
        elif key == "additionalProperties":
            if value is False:
                continue  # unknown fields are refused by strict field validation / pruned
            if value is True or value == {}:
                out["x-kubernetes-preserve-unknown-fields"] = True
            else:
                out[key] = _convert(value, defs)
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            out[bound] = value
            out[key] = True
        elif key == "default" and value is None:
            continue
        else:
            out[key] = value
    if out.get("type") == "object" and "properties" in out and "additionalProperties" in out:
        raise ValueError("additionalProperties may not sit beside properties in a CRD schema")
    return out


def root_schema() -> dict[str, Any]:
    """The openAPIV3Schema of the GRPORun version."""
    spec = to_structural(GRPORunSpec)
    # Read back before the operator's first pass, a run without a status would be Current
    # (healthy) to kstatus and so to Flux; generation 1 not yet observed is InProgress.
    status = {**to_structural(GRPORunStatus), "default": {"observedGeneration": 0}}
    return {
        "description": normalise_description(
            "GRPORun runs GRPO fine-tuning of a language model on a dedicated KubeRay "
            "RayCluster and keeps the run's ledger, recovery and terminal state in status."
        ),
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        "x-kubernetes-validations": [rule.to_crd() for rule in GRPORun.RULES],
    }


PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Step", "type": "integer", "jsonPath": ".status.ledger.completedSteps"},
    {"name": "Done%", "type": "integer", "jsonPath": ".status.progress.percent"},
    {"name": "ETA", "type": "string", "jsonPath": ".status.progress.eta"},
    {"name": "Reward", "type": "number", "jsonPath": ".status.ledger.rewardMean"},
    {"name": "Restarts", "type": "integer", "jsonPath": ".status.recovery.restarts"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {
        "name": "Activity",
        "type": "string",
        "jsonPath": ".status.progress.activity",
        "priority": 1,
    },
    {
        "name": "Eval",
        "type": "number",
        "jsonPath": ".status.ledger.evals[0].passAt1",
        "description": "pass@1 of the newest evaluation on the validation file",
        "priority": 1,
    },
    {
        "name": "Waiting",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="ClusterReady")].message',
        "description": "why the RayCluster is not ready: Kueue's verdict while the run is "
        "queued, a pod that does not start",
        "priority": 1,
    },
    {
        "name": "Reason",
        "type": "string",
        "jsonPath": ".status.terminal.reason",
        "priority": 1,
    },
]


def build_crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition object."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": c.CRD_NAME,
            "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY},
        },
        "spec": {
            "group": c.GROUP,
            "names": {
                "kind": c.KIND,
                "listKind": c.LIST_KIND,
                "plural": c.PLURAL,
                "singular": c.SINGULAR,
                "shortNames": list(c.SHORT_NAMES),
                "categories": list(c.CATEGORIES),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": c.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": root_schema()},
                }
            ],
        },
    }
