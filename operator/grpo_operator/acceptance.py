"""What only the operator can judge before anything is created: the budget against the plan,
the access modes of the volumes, a python reward's ConfigMap, and what the operator's installer
lets runs reach (host directories, the operator's own Secret). Pure: the caller reads the PVCs,
the reward's ConfigMap and the settings.

The CRD refuses what every installation refuses (``api.confinement``); what depends on an
installation's settings is here. hostPath volumes are frozen, so judging them once, at
acceptance, covers the run's whole life.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from grpo_operator.api.inputs import VolumeSource
from grpo_operator.api.spec import GRPORunSpec
from grpo_operator.api.token_budget import TokenBudget

HOST_PATH_PREFIXES_ENV = "GRPO_HOSTPATH_PREFIXES"

READ_MANY = {"ReadOnlyMany", "ReadWriteMany"}
WRITE_MANY = {"ReadWriteMany"}


@dataclass(frozen=True)
class Refusal:
    reason: str  # CamelCase, for the Accepted condition
    message: str


@dataclass(frozen=True)
class Confinement:
    """What this installation lets a run reach, from the operator's settings."""

    host_path_prefixes: tuple[str, ...] = ()
    """Normalised absolute directories hostPath volumes must lie under; empty: no hostPath
    volume at all (a node's directories are not a run's to choose)."""
    reserved_secrets: tuple[str, ...] = ()
    """Secret names no run may reference besides the per-run ones the CRD refuses: the
    operator's signing Secret, whose key every run's report key derives from (a run in the
    operator's namespace could otherwise read it)."""


def host_path_prefixes(raw: str) -> tuple[str, ...]:
    """``GRPO_HOSTPATH_PREFIXES``: comma-separated absolute directories, normalised (trailing
    slashes and repeated slashes dropped); a relative one, or one with ``.`` or ``..``, is an
    error naming the setting."""
    prefixes = []
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        if not item.startswith("/") or any(p in (".", "..") for p in item.split("/")):
            raise ValueError(f"{HOST_PATH_PREFIXES_ENV}: {item!r} is not an absolute directory "
                             "without '.' or '..' components")
        prefixes.append(str(PurePosixPath(item)))
    return tuple(dict.fromkeys(prefixes))


def under(path: str, prefix: str) -> bool:
    """Whether ``path`` is ``prefix`` or lies below it, by whole components (``/data2`` is not
    under ``/data``). Lexical: '..' is refused outright (the CRD refuses it too); a symlink on
    the node is the installer's to avoid under the prefixes it allows."""
    parts = PurePosixPath(path).parts
    if ".." in parts:
        return False
    base = PurePosixPath(prefix).parts
    return parts[: len(base)] == base


def check_budget(spec: GRPORunSpec) -> Refusal | None:
    """The plan's worst case against budget.maxGeneratedTokens (``api.token_budget``); the
    evaluations count when evalMaxPrompts bounds them (the validation file is not the
    operator's to read).

    GPU-hours cannot be bounded from the plan (they depend on throughput): they are metered
    while the run goes, not judged here."""
    budget = TokenBudget.of(spec, eval_prompts=spec.algorithm.eval_max_prompts)
    refusal = budget.refuse_plan(spent=0, step=0)
    return None if refusal is None else Refusal("BudgetTooSmall", refusal)


def claims(spec: GRPORunSpec) -> dict[str, tuple[str, set[str]]]:
    """PVC name → (what it is for, the access modes that suffice). Every Ray pod mounts the
    inputs (several nodes); the head and the workers write checkpoints."""
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


def reward_config_map(spec: GRPORunSpec) -> str | None:
    """The ConfigMap holding a python reward's file, if the run names one."""
    python = spec.reward.python
    return python.config_map if python is not None else None


def check_reward_config_map(
    spec: GRPORunSpec, config_maps: Mapping[str, Mapping[str, Any] | None]
) -> Refusal | None:
    """``config_maps`` maps :func:`reward_config_map`'s name to the ConfigMap as read (None:
    missing). Without it, or without its key, the Ray pods would never start (the kubelet
    waits for a ConfigMap volume's object and key). A ConfigMap deleted later keeps the
    running pods' file; a pod made after that waits, as any pod missing a volume does."""
    name = reward_config_map(spec)
    if name is None:
        return None
    key = spec.reward.python.key
    config_map = config_maps.get(name)
    if config_map is None:
        return Refusal("RewardNotFound",
                       f"ConfigMap {name} (reward.python.configMap) does not exist")
    keys = set(config_map.get("data") or {}) | set(config_map.get("binaryData") or {})
    if key not in keys:
        held = ", ".join(sorted(keys)) or "none"
        return Refusal("RewardNotFound",
                       f"ConfigMap {name} (reward.python.configMap) has no key {key} "
                       f"(reward.python.key); its keys: {held}")
    return None


def _volumes(spec: GRPORunSpec) -> Iterable[tuple[str, VolumeSource]]:
    yield "model.volume", spec.model.volume
    yield "dataset.volume", spec.dataset.volume
    yield "checkpoint.volume", spec.checkpoint.volume


def check_host_paths(spec: GRPORunSpec, prefixes: tuple[str, ...]) -> Refusal | None:
    """hostPath volumes only under the installation's prefixes: a pod mounting a node's
    directory (the checkpoint one writable) reaches past its run to whatever lives there."""
    for field, volume in _volumes(spec):
        if volume.host_path is None:
            continue
        path = volume.host_path.path
        if not prefixes:
            return Refusal(
                "HostPathNotAllowed",
                f"{field}.hostPath ({path}): this operator allows no hostPath volumes "
                f"({HOST_PATH_PREFIXES_ENV} is empty); use a persistentVolumeClaim",
            )
        if not any(under(path, prefix) for prefix in prefixes):
            return Refusal(
                "HostPathNotAllowed",
                f"{field}.hostPath.path {path} is not under a directory this operator allows "
                f"hostPath volumes in ({', '.join(prefixes)})",
            )
    return None


def _region(volume: VolumeSource, path: str | None) -> tuple[str, PurePosixPath]:
    """What a mount reaches: its volume (a claim, or the node's filesystem for hostPath) and the
    directory in it."""
    if volume.persistent_volume_claim is not None:
        return f"PersistentVolumeClaim {volume.persistent_volume_claim.claim_name}", \
            PurePosixPath("/", path or "")
    return "the node's filesystem", PurePosixPath(volume.host_path.path, path or "")


def check_frozen_inputs_apart(spec: GRPORunSpec) -> Refusal | None:
    """The checkpoint volume must not reach the model or the dataset: checkpoints written into
    the frozen model (this run's or another run's, which share the checkpoint volume) would
    change it under the digest, and the run would fail at its end, or train on it."""
    checkpoint = _region(spec.checkpoint.volume, spec.checkpoint.path)
    for field, volume, path in (("model", spec.model.volume, spec.model.path),
                                ("dataset", spec.dataset.volume, None)):
        frozen = _region(volume, path)
        if frozen[0] != checkpoint[0]:
            continue
        nested = frozen[1].is_relative_to(checkpoint[1]) or checkpoint[1].is_relative_to(frozen[1])
        if nested:
            return Refusal(
                "FrozenInputOverlap",
                f"checkpoint.volume (directory {checkpoint[1]} of {checkpoint[0]}) overlaps "
                f"{field}.volume (directory {frozen[1]}): checkpoints must not be written where "
                f"the frozen {field} lives; use another claim or disjoint directories",
            )
    return None


def check_secrets(spec: GRPORunSpec, reserved: tuple[str, ...]) -> Refusal | None:
    r = spec.resources
    refs = [(f"resources.env[{i}].valueFrom.secretKeyRef.name", e.value_from.secret_key_ref.name)
            for i, e in enumerate(r.env) if e.value_from is not None]
    refs += [(f"resources.imagePullSecrets[{i}].name", s.name)
             for i, s in enumerate(r.image_pull_secrets)]
    for field, name in refs:
        if name in reserved:
            return Refusal(
                "SecretNotAllowed",
                f"{field} names Secret {name}, the operator's report-signing Secret: no run "
                "may reference it",
            )
    return None


def accept(
    spec: GRPORunSpec,
    pvcs: Mapping[str, Mapping[str, Any] | None],
    confinement: Confinement = Confinement(),
    config_maps: Mapping[str, Mapping[str, Any] | None] | None = None,
) -> Refusal | None:
    """``pvcs`` and ``config_maps``: the objects the run names, as read (see
    :func:`check_volumes`, :func:`check_reward_config_map`)."""
    return (
        check_budget(spec)
        or check_host_paths(spec, confinement.host_path_prefixes)
        or check_frozen_inputs_apart(spec)
        or check_secrets(spec, confinement.reserved_secrets)
        or check_volumes(spec, pvcs)
        or check_reward_config_map(spec, config_maps or {})
    )
