"""docs/api.md, generated from the models so that the reference cannot drift from the code.

Every field's meaning comes from its docstring in the models; type, default, bounds and
mutability come from the generated CRD schema and the transition rules.
"""

from __future__ import annotations

import json
from typing import Any

from grpo_operator.api import checkpoint_layout, confinement, contract, digest
from grpo_operator.api import constants as c
from grpo_operator.api.contract import CONTRACT_VERSION, HISTORY
from grpo_operator.api.crd import PRINTER_COLUMNS, root_schema, to_structural
from grpo_operator.api.exit_codes import NON_RETRYABLE_EXIT_CODES, ExitCode, classify_exit
from grpo_operator.api.report import MAX_REPORT_BYTES, REPORT_KEY, Report
from grpo_operator.api.run_config import (
    DATA_MOUNT,
    MODEL_MOUNT,
    RUN_CONFIG_ENV,
    RUN_CONFIG_KEY,
    RUN_CONFIG_PATH,
    RunConfig,
)
from grpo_operator.api.spec import GRPORunSpec


def _mutability_of(path: str) -> str:
    """Mutability of a spec field, from the transition rules (path relative to spec)."""
    rules = GRPORunSpec.TRANSITION_RULES
    if any(path in r.raise_only for r in rules):
        return "may only be raised"
    if any(path in r.one_way for r in rules):
        return "may be set to true, not back"
    frozen = {p for r in rules for p in r.frozen}
    parts = path.split(".")
    if any(".".join(parts[:i]) in frozen for i in range(1, len(parts) + 1)):
        return "frozen"
    if any(p.startswith(path + ".") for p in frozen):
        return "partly frozen (see fields)"
    return "editable"


def _cell(text: Any) -> str:
    """Table-safe text: pipes escaped, and `<...>` outside code spans kept visible."""
    parts = str(text).replace("|", "\\|").replace("\n", " ").split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def _type_of(schema: dict[str, Any], path: str) -> str:
    if schema.get("x-kubernetes-int-or-string"):
        return "quantity (string or integer)"
    kind = schema.get("type", "any")
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return "object (passed through)"
    if kind == "object" and "properties" in schema:
        return f"object ([`{path}`](#{_anchor(path)}))"
    if kind == "object" and "additionalProperties" in schema:
        return f"map of {_type_of(schema['additionalProperties'], path + '.*')}"
    if kind == "array":
        item = schema["items"]
        if item.get("type") == "object" and "properties" in item:
            return f"list of object ([`{path}[]`](#{_anchor(path + '[]')}))"
        return f"list of {_type_of(item, path + '[]')}"
    if "format" in schema:
        return f"{kind} ({schema['format']})"
    return kind


def _bounds(schema: dict[str, Any]) -> str:
    out = []
    if "enum" in schema:
        out.append("one of " + ", ".join(f"`{v}`" for v in schema["enum"]))
    if "minimum" in schema:
        op = "<" if schema.get("exclusiveMinimum") else "≤"
        out.append(f"{schema['minimum']} {op} x")
    if "maximum" in schema:
        op = "<" if schema.get("exclusiveMaximum") else "≤"
        out.append(f"x {op} {schema['maximum']}")
    for key, label in (
        ("minLength", "min length"),
        ("maxLength", "max length"),
        ("maxItems", "max items"),
        ("maxProperties", "max entries"),
    ):
        if key in schema:
            out.append(f"{label} {schema[key]}")
    if "pattern" in schema:
        out.append(f"pattern `{schema['pattern']}`")
    if schema.get("x-kubernetes-list-type") == "map":
        keys = ", ".join(schema.get("x-kubernetes-list-map-keys", []))
        out.append(f"unique by {keys}")
    return "; ".join(out) or "—"


def _anchor(path: str) -> str:
    return "".join(ch for ch in path.lower() if ch.isalnum() or ch == "-")


def _objects(schema: dict[str, Any], path: str, stop: frozenset[str]):
    """(path, schema) of every object with properties, depth first, parents first."""
    if schema.get("type") == "object" and "properties" in schema:
        yield path, schema
        if path in stop:
            return
        for name, prop in schema["properties"].items():
            yield from _objects(prop, f"{path}.{name}", stop)
    elif schema.get("type") == "array":
        yield from _objects(schema["items"], path + "[]", stop)
    elif schema.get("type") == "object" and isinstance(schema.get("additionalProperties"), dict):
        yield from _objects(schema["additionalProperties"], path + ".*", stop)


def _object_tables(
    schema: dict[str, Any], root: str, *, mutability: bool, stop: frozenset[str] = frozenset()
) -> list[str]:
    lines: list[str] = []
    for path, obj in _objects(schema, root, stop):
        lines += [f"### `{path}`", ""]
        if obj.get("description"):
            lines += [obj["description"], ""]
        head = "| Field | Type | Default | Bounds |" + (" Mutability |" if mutability else "")
        lines += [head + " Description |", "|---" * (5 + mutability) + "|"]
        required = set(obj.get("required", []))
        for name, prop in obj["properties"].items():
            field_path = f"{path}.{name}"
            kind = _type_of(prop, field_path) + (", **required**" if name in required else "")
            default = f"`{json.dumps(prop['default'])}`" if "default" in prop else "—"
            row = [f"`{name}`", kind, default, _bounds(prop)]
            if mutability:
                row.append(_mutability_of(field_path.removeprefix(f"{root}.")))
            row.append(prop.get("description", ""))
            lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
        rules = [r for r in obj.get("x-kubernetes-validations", []) if "oldSelf" not in r["rule"]]
        if rules:
            lines += ["", "Rules:", ""] + [f"- {r['message']}" for r in rules]
        lines.append("")
    return lines


def _name_section() -> list[str]:
    lines = [
        "## Names",
        "",
        f"A GRPORun's name is a DNS-1035 label of at most {c.MAX_RUN_NAME_LENGTH} characters "
        "(CEL rules on `metadata.name`), so that every name derived from it stays whole and "
        "within Kubernetes' limits (n is the run name's length):",
        "",
        f"| Derived name | Length | At n = {c.MAX_RUN_NAME_LENGTH} | Limit | Why |",
        "|---|---|---|---|---|",
    ]
    for what, expr, total, limit, why in c.NAME_BUDGET:
        lines.append(f"| {_cell(what)} | {expr} | {total} | {limit} | {_cell(why)} |")
    return lines + [""]


def _confinement_section() -> list[str]:
    lines = [
        "## Confinement",
        "",
        "A run reaches nothing beyond its own run. The API server refuses, on create and on "
        "every update (rules of `spec.resources`):",
        "",
        "- `env[].name` that the trainer, Ray, KubeRay or the container runtime own:",
        "",
        "| Name | Owner | Why |",
        "|---|---|---|",
    ]
    for entry in confinement.RESERVED_ENV:
        name = f"`{entry.pattern}`" + (f" (not `{entry.open_prefix}*`)" if entry.open_prefix
                                       else "")
        lines.append(f"| {name} | {_cell(entry.owner)} | {_cell(entry.why)}. |")
    suffixes = " and ".join(f"`<run>{s}`" for s in confinement.RUN_SECRET_SUFFIXES)
    lines += [
        "",
        f"- Secrets named by `env[].valueFrom.secretKeyRef` or `imagePullSecrets` that are "
        f"the operator's: a run's {suffixes} (the Ray token, and the key that signs the run's "
        "reports), of this run or another, and the operator's own "
        f"`<release>{confinement.SIGNING_SECRET_SUFFIX}` (the key the report keys derive "
        "from). The rule goes by the suffix, so a user's Secret named so is refused too.",
        "- `extraResources` naming " + ", ".join(f"`{n}`" for n in confinement.NATIVE_RESOURCES)
        + " (set by `worker`), `gpuResourceName`, or any GPU resource ("
        + ", ".join(f"`{m}`" for m in confinement.GPU_NAME_MARKS)
        + "): GPUs come only from `gpusPerWorker`, and the operator meters those; "
        "`gpuResourceName` itself must be an extended resource (`<domain>/<name>`).",
        "",
        "What depends on the installation is judged when the operator accepts the run "
        "(`Accepted=False`, phase `Failed`): a `hostPath` volume is refused unless its path "
        "lies, by whole path components, under one of the operator's `GRPO_HOSTPATH_PREFIXES` "
        "(reason `HostPathNotAllowed`; none by default), and a reference to the operator's "
        "report-signing Secret under a name of its own (`GRPO_SIGNING_SECRET`) is refused (reason "
        "`SecretNotAllowed`). So is a checkpoint volume that reaches the model or the dataset: "
        "the same claim (or, for `hostPath`, the node's filesystem) with one directory inside "
        "the other, the dataset counting as its whole volume (reason `FrozenInputOverlap`).",
        "",
    ]
    return lines


def _exit_code_section() -> list[str]:
    lines = [
        "## Exit codes",
        "",
        "The trainer's exit code, passed on by the driver Job (17 is the driver's own: it could "
        "not write the trainer's terminal report). The terminal report, when present, "
        "is the authority on how a run ended; the exit code is the fallback. A driver pod that "
        "vanished without an exit code, a signal death (128 + n) and any code not listed are "
        "retryable. The driver Job's `podFailurePolicy.onExitCodes` lists "
        + ", ".join(str(code) for code in NON_RETRYABLE_EXIT_CODES)
        + ".",
        "",
        "| Code | Name | Meaning | Retryable | Outcome | Reason |",
        "|---|---|---|---|---|---|",
    ]
    for code in ExitCode:
        d = classify_exit(int(code))
        outcome = d.outcome.value if d.outcome else "—"
        lines.append(
            f"| {int(code)} | `{code.name}` | {code.meaning} | {'yes' if d.retryable else 'no'}"
            f" | {outcome} | `{d.reason.value}` |"
        )
    vanished = classify_exit(None)
    lines.append(f"| none | (pod vanished) | {vanished.message} | yes | — | `{vanished.reason}` |")
    return lines + [""]


def _contract_sections() -> list[str]:
    lines = [
        "## Contract version",
        "",
        f"This tree's contract version is **{CONTRACT_VERSION}**.",
        "",
        "```text",
        contract.__doc__.strip(),
        "```",
        "",
        "| version | what it added |",
        "|---|---|",
        *(f"| {version} | {added} |" for version, added in HISTORY.items()),
        "",
        "## Run config",
        "",
        f"The operator writes the run config as JSON under key `{RUN_CONFIG_KEY}` of the run's "
        f"run-config ConfigMap, mounted at `{RUN_CONFIG_PATH}` (`${RUN_CONFIG_ENV}` overrides "
        f"the path outside a pod). In-pod paths: model `{MODEL_MOUNT}`, dataset `{DATA_MOUNT}`, "
        f"checkpoints `{checkpoint_layout.CHECKPOINT_MOUNT}/<run-uid>/`.",
        "",
    ]
    lines += _object_tables(
        to_structural(RunConfig), "runConfig", mutability=False, stop=frozenset({"runConfig.spec"})
    )
    lines += [
        "## Report",
        "",
        f"The trainer replaces key `{REPORT_KEY}` of the report ConfigMap with one JSON document "
        f"of at most {MAX_REPORT_BYTES} bytes. Parsing is strict (unknown fields, a wrong "
        "schemaVersion or an inconsistent state are refused, naming the field). The operator "
        "ignores a stale report: one from an older attempt, or from the same attempt with a "
        "sequence not above the last accepted one (status.acceptedReport).",
        "",
    ]
    lines += _object_tables(to_structural(Report), "report", mutability=False)
    lines += ["Rules:", ""] + [f"- {r.message}" for r in Report.RULES] + [""]
    lines += _exit_code_section()
    lines += ["## Digest manifest", "", "```text", digest.__doc__.strip(), "```", ""]
    lines += ["## Checkpoint layout", "", "```text", checkpoint_layout.__doc__.strip(), "```", ""]
    return lines


def render_api_docs() -> str:
    """The whole of docs/api.md."""
    schema = root_schema()
    columns = ", ".join(col["name"] for col in PRINTER_COLUMNS)
    lines = [
        "<!-- Generated by `python -m grpo_operator.api.generate` from operator/grpo_operator/api;"
        " do not edit. -->",
        "",
        "# GRPORun API reference",
        "",
        f"Group `{c.GROUP}`, version `{c.VERSION}`, kind `{c.KIND}` (plural `{c.PLURAL}`, short "
        f"name `{c.SHORT_NAMES[0]}`), namespaced, with a status subresource. `kubectl get grpo` "
        f"shows {columns}.",
        "",
        "A GRPORun names a frozen model and dataset, a verifiable reward, the GRPO settings, "
        "the compute and a budget; the operator runs it on a dedicated KubeRay RayCluster. "
        "The API server validates a manifest fully (bounds, enums and the CEL rules listed "
        "below), so `kubectl apply` and Argo CD refuse a bad one before anything is created. "
        "Mutability: *frozen* fields cannot change after creation (removing one counts as a "
        "change); *editable* fields may change at any time.",
        "",
    ]
    lines += _name_section()
    lines += _confinement_section()
    lines += ["## Spec", ""]
    lines += _object_tables(schema["properties"]["spec"], "spec", mutability=True)
    lines += [
        "## Status",
        "",
        "Written only by the operator, through the status subresource. Conditions (type "
        + ", ".join(f"`{t.value}`" for t in c.ConditionType)
        + ") follow metav1.Condition, so `kubectl wait --for=condition=Succeeded` works.",
        "",
    ]
    lines += _object_tables(schema["properties"]["status"], "status", mutability=False)
    lines += _contract_sections()
    return "\n".join(lines).rstrip() + "\n"
