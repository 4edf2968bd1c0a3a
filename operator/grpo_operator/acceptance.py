"""What only the operator can judge before anything is created: the budget against the plan,
and the access modes of the volumes. Pure: the caller reads the PVCs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grpo_operator.api.inputs import VolumeSource
from grpo_operator.api.spec import GRPORunSpec

READ_MANY = {"ReadOnlyMany", "ReadWriteMany"}
WRITE_MANY = {"ReadWriteMany"}


@dataclass(frozen=True)
class Refusal:
    reason: str  # CamelCase, for the Accepted condition
    message: str


def worst_case_tokens_per_step(spec: GRPORunSpec) -> int:
    a = spec.algorithm
    return a.prompts_per_step * a.group_size * a.max_response_tokens


def check_budget(spec: GRPORunSpec) -> Refusal | None:
    """With stopAtLimit false the worst case of the whole plan must fit (an aggregate
    admission); with stopAtLimit true one full step must, and the trainer stops at the limit.

    GPU-hours cannot be bounded from the plan (they depend on throughput): they are metered
    while the run goes, not judged here."""
    limit = spec.budget.max_generated_tokens
    if limit is None:
        return None
    per_step = worst_case_tokens_per_step(spec)
    a = spec.algorithm
    if spec.budget.stop_at_limit:
        if per_step > limit:
            return Refusal(
                "BudgetTooSmall",
                f"budget.maxGeneratedTokens ({limit}) is below one step's worst case "
                f"({a.prompts_per_step} prompts x {a.group_size} completions x "
                f"{a.max_response_tokens} tokens = {per_step})",
            )
        return None
    plan = per_step * a.max_steps
    if plan > limit:
        return Refusal(
            "BudgetTooSmall",
            f"budget.maxGeneratedTokens ({limit}) is below the plan's worst case "
            f"({a.max_steps} steps x {per_step} tokens = {plan}); raise the budget, lower "
            "algorithm.maxSteps, or set budget.stopAtLimit to stop at the limit",
        )
    return None


def claims(spec: GRPORunSpec) -> dict[str, tuple[str, set[str]]]:
    """PVC name → (what it is for, the access modes that suffice). Every Ray pod and the
    driver mount the inputs (several nodes); the head and the workers write checkpoints."""
    wanted: dict[str, tuple[str, set[str]]] = {}

    def add(volume: VolumeSource, role: str, modes: set[str]) -> None:
        pvc = volume.persistent_volume_claim
        if pvc is None:
            return
        if pvc.claim_name in wanted:
            previous_role, previous = wanted[pvc.claim_name]
            wanted[pvc.claim_name] = (f"{previous_role} and {role}", previous & modes)
        else:
            wanted[pvc.claim_name] = (role, set(modes))

    add(spec.model.volume, "model", READ_MANY)
    add(spec.dataset.volume, "dataset", READ_MANY)
    add(spec.checkpoint.volume, "checkpoint", WRITE_MANY)
    return wanted


def check_volumes(
    spec: GRPORunSpec, pvcs: Mapping[str, Mapping[str, Any] | None]
) -> Refusal | None:
    """``pvcs`` maps each claim name of :func:`claims` to the PVC as read (None: missing)."""
    for name, (role, modes) in sorted(claims(spec).items()):
        pvc = pvcs.get(name)
        if pvc is None:
            return Refusal(
                "VolumeNotFound", f"PersistentVolumeClaim {name} ({role}) does not exist"
            )
        have = set((pvc.get("spec") or {}).get("accessModes") or [])
        if not have & modes:
            needed = " or ".join(sorted(modes))
            return Refusal(
                "VolumeAccessMode",
                f"PersistentVolumeClaim {name} ({role}) has access modes "
                f"{sorted(have) or 'none'}; it is mounted by pods on several nodes and needs "
                f"{needed}",
            )
    return None


def accept(spec: GRPORunSpec, pvcs: Mapping[str, Mapping[str, Any] | None]) -> Refusal | None:
    return check_budget(spec) or check_volumes(spec, pvcs)
