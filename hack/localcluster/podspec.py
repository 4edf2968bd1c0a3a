"""Turning a driver pod's spec into a local process: where each volume lives on this machine,
the container's environment, and its command — pure functions of the pod and what the API
server says about the objects it references."""

from __future__ import annotations

import base64
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class PodSpecError(ValueError):
    """The pod cannot run here: a feature the harness lacks, or a spec it cannot honour."""


class MissingObject(PodSpecError):
    """An object the pod references is not there yet (a ConfigMap, a Secret, an unbound claim):
    a kubelet keeps the pod waiting and retries, and so does the harness."""


class ObjectSource(Protocol):
    """Reads the objects a pod references (the runner's API client implements it)."""

    def config_map(self, namespace: str, name: str) -> dict[str, str] | None: ...
    def secret(self, namespace: str, name: str) -> dict[str, bytes] | None: ...
    def pvc_host_path(self, namespace: str, claim: str) -> Path | None: ...
    def service_account_token(
        self, pod: dict, audience: str | None, expiration_seconds: int
    ) -> str: ...


@dataclass(frozen=True)
class Mount:
    source: Path  # on this machine
    target: str  # inside the pod
    read_only: bool


_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: defined variables are replaced, ``$$`` escapes,
    unknown references stay as written."""

    def replace(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _VAR_REF.sub(replace, text)


def _field(pod: dict, path: str) -> str:
    meta = pod["metadata"]
    fields = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": pod["spec"].get("nodeName", ""),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
        "status.podIP": (pod.get("status") or {}).get("podIP") or "127.0.0.1",
        "status.hostIP": "127.0.0.1",
    }
    label = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if label:
        return (meta.get(label.group(1)) or {}).get(label.group(2), "")
    if path not in fields:
        raise PodSpecError(f"fieldRef {path} is not supported by the harness")
    return fields[path]


def _key(data: dict | None, kind: str, ns: str, name: str, key: str, optional: bool):
    if data is None or key not in data:
        if optional:
            return None
        raise MissingObject(f"{kind} {ns}/{name} (key {key!r}) not found")
    return data[key]


def pre_stop_command(container: dict) -> list[str] | None:
    """The container's preStop ``exec`` hook, or None. The harness runs no other kind of hook
    (``httpGet``, ``sleep``): a pod that has one cannot run here."""
    hook = ((container.get("lifecycle") or {}).get("preStop")) or {}
    if not hook:
        return None
    if set(hook) != {"exec"} or not (hook["exec"] or {}).get("command"):
        raise PodSpecError(f"container {container['name']}: the harness runs only preStop "
                           f"hooks of kind exec, not {sorted(hook)}")
    return list(hook["exec"]["command"])


def process_environment(pod_name: str, container_env: dict[str, str]) -> dict[str, str]:
    """What a process of the pod's container starts with here: the image stand-in's PATH (this
    virtualenv first), HOME, LANG and the pod's HOSTNAME, then the container's own."""
    return {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": os.path.expanduser("~"), "LANG": "C.UTF-8", "HOSTNAME": pod_name,
            **container_env}


def environment(pod: dict, container: dict, source: ObjectSource) -> dict[str, str]:
    """The container's environment as the kubelet would compute it (envFrom, then env)."""
    ns = pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    for ref in container.get("envFrom") or []:
        prefix = ref.get("prefix", "")
        if "configMapRef" in ref:
            name = ref["configMapRef"]["name"]
            data = source.config_map(ns, name)
            if data is None and not ref["configMapRef"].get("optional"):
                raise MissingObject(f"ConfigMap {ns}/{name} not found")
            env.update({prefix + k: v for k, v in (data or {}).items()})
        elif "secretRef" in ref:
            name = ref["secretRef"]["name"]
            data = source.secret(ns, name)
            if data is None and not ref["secretRef"].get("optional"):
                raise MissingObject(f"Secret {ns}/{name} not found")
            env.update({prefix + k: v.decode() for k, v in (data or {}).items()})
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand(var.get("value", ""), env)
            continue
        frm = var["valueFrom"]
        if "fieldRef" in frm:
            env[name] = _field(pod, frm["fieldRef"]["fieldPath"])
        elif "configMapKeyRef" in frm:
            ref = frm["configMapKeyRef"]
            value = _key(source.config_map(ns, ref["name"]), "ConfigMap", ns, ref["name"],
                         ref["key"], ref.get("optional", False))
            if value is not None:
                env[name] = value
        elif "secretKeyRef" in frm:
            ref = frm["secretKeyRef"]
            value = _key(source.secret(ns, ref["name"]), "Secret", ns, ref["name"], ref["key"],
                         ref.get("optional", False))
            if value is not None:
                env[name] = value.decode()
        else:
            raise PodSpecError(f"env {name}: only fieldRef, configMapKeyRef and secretKeyRef "
                               "are supported by the harness")
    return env


def command(container: dict, env: dict[str, str]) -> list[str]:
    """``command`` + ``args`` with ``$(VAR)`` expanded. The harness has no images, so a pod
    relying on an image's entrypoint cannot run here."""
    if not container.get("command"):
        raise PodSpecError(
            f"container {container['name']} has no command: the harness runs only explicit "
            "commands (it has no images)"
        )
    return [expand(a, env) for a in container["command"] + (container.get("args") or [])]


def _write_items(directory: Path, data: dict[str, bytes], items: list[dict] | None) -> None:
    selected = (
        {item["key"]: item["path"] for item in items} if items else {k: k for k in data}
    )
    for key, rel in selected.items():
        if key not in data:
            raise PodSpecError(f"key {key!r} not found")
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data[key])


def _encoded(data: dict[str, str] | None) -> dict[str, bytes] | None:
    return None if data is None else {k: v.encode() for k, v in data.items()}


def materialise_volumes(pod: dict, pod_dir: Path, source: ObjectSource) -> dict[str, Path]:
    """Each volume's directory on this machine. Mapping rule (documented in the README):

    - configMap, secret, projected (serviceAccountToken, configMap, secret, downwardAPI) and
      emptyDir: files written under ``<pod_dir>/volumes/<volume>/``;
    - hostPath: the same path on this machine;
    - persistentVolumeClaim: the ``hostPath``/``local`` path of the PersistentVolume the claim
      is bound to (a claim that is not bound yet keeps the pod from starting, as on a node).
    """
    ns = pod["metadata"]["namespace"]
    paths: dict[str, Path] = {}
    for volume in pod["spec"].get("volumes") or []:
        name = volume["name"]
        local = pod_dir / "volumes" / name
        if "hostPath" in volume:
            paths[name] = Path(volume["hostPath"]["path"])
            continue
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            host = source.pvc_host_path(ns, claim)
            if host is None:
                raise MissingObject(f"PersistentVolumeClaim {ns}/{claim} is not bound to a "
                                    "hostPath or local PersistentVolume")
            paths[name] = host
            continue
        local.mkdir(parents=True, exist_ok=True)
        paths[name] = local
        if "emptyDir" in volume:
            continue
        if "configMap" in volume or "secret" in volume:
            _write_object_keys(volume, ns, local, source)
        elif "projected" in volume:
            _project(pod, volume["projected"], local, source)
        else:
            kinds = sorted(set(volume) - {"name"})
            raise PodSpecError(f"volume {name}: source {kinds} is not supported by the harness")
    return paths


def _write_object_keys(item: dict, ns: str, local: Path, source: ObjectSource) -> None:
    """A ConfigMap's or Secret's keys as files (a volume source or a projected one; a Secret
    volume names its Secret ``secretName``, a projected one ``name``)."""
    if "configMap" in item:
        ref, kind = item["configMap"], "ConfigMap"
        data = _encoded(source.config_map(ns, ref["name"]))
    else:
        ref, kind = item["secret"], "Secret"
        data = source.secret(ns, ref.get("secretName") or ref["name"])
    if data is None and not ref.get("optional"):
        raise MissingObject(f"{kind} {ns}/{ref.get('secretName') or ref['name']} not found")
    _write_items(local, data or {}, ref.get("items"))


def _project(pod: dict, projected: dict, local: Path, source: ObjectSource) -> None:
    ns = pod["metadata"]["namespace"]
    for item in projected.get("sources") or []:
        if "serviceAccountToken" in item:
            sat = item["serviceAccountToken"]
            token = source.service_account_token(
                pod, sat.get("audience"), sat.get("expirationSeconds", 3607)
            )
            (local / sat["path"]).write_text(token)
        elif "configMap" in item or "secret" in item:
            _write_object_keys(item, ns, local, source)
        elif "downwardAPI" in item:
            for entry in item["downwardAPI"].get("items") or []:
                value = _field(pod, entry["fieldRef"]["fieldPath"])
                (local / entry["path"]).write_text(value)


def mounts(container: dict, volumes: dict[str, Path]) -> list[Mount]:
    result = []
    for mount in container.get("volumeMounts") or []:
        source = volumes[mount["name"]]
        if mount.get("subPath"):
            source = source / mount["subPath"]
        result.append(Mount(source, mount["mountPath"], bool(mount.get("readOnly"))))
    return result


def decode_secret(data: dict[str, str] | None) -> dict[str, bytes] | None:
    return None if data is None else {k: base64.b64decode(v) for k, v in data.items()}


def read_only_root(container: dict) -> bool:
    return bool((container.get("securityContext") or {}).get("readOnlyRootFilesystem"))


def split_tmp(mounts: list[Mount]) -> tuple[list[Mount], Path | None]:
    """The mounts without the one at /tmp, and that one's source (a pod's own /tmp)."""
    at_tmp = [m for m in mounts if m.target == "/tmp"]
    return [m for m in mounts if m.target != "/tmp"], at_tmp[0].source if at_tmp else None
