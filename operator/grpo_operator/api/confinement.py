"""What a run's spec may not name because it belongs to someone else: environment variables
that the trainer, Ray, KubeRay or the container runtime set or read for their own wiring, the
operator's Secrets (each run's, and its own signing Secret), and GPUs other than the metered
ones.

Each is a `Rule` of the models (`resources`), so the API server refuses such a spec on create
and on every update, and the operator refuses it too if the installed CRD is older. What only
the operator's installer can decide (the host directories runs may mount) is judged when the
operator accepts a run (``grpo_operator.acceptance``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReservedEnv:
    """Environment variable names a run may not set in ``resources.env``."""

    pattern: str
    """A name, or a prefix ending in ``*``."""
    owner: str
    why: str
    open_prefix: str | None = None
    """Names under this prefix stay open (``pattern`` must be a prefix)."""

    @property
    def prefix(self) -> str | None:
        return self.pattern[:-1] if self.pattern.endswith("*") else None

    def covers(self, name: str) -> bool:
        if self.prefix is None:
            return name == self.pattern
        return name.startswith(self.prefix) and not (
            self.open_prefix and name.startswith(self.open_prefix)
        )

    def cel(self) -> str:
        if self.prefix is None:
            return f"self.name == '{self.pattern}'"
        test = f"self.name.startsWith('{self.prefix}')"
        if self.open_prefix:
            test = f"({test} && !self.name.startsWith('{self.open_prefix}'))"
        return test

    @property
    def label(self) -> str:
        return f"{self.pattern} (except {self.open_prefix}*)" if self.open_prefix else self.pattern


_DEVICES = (
    "selects the devices the container runtime hands the container, whatever the scheduler "
    "allocated: `all` would give a pod every accelerator of its node, other runs' included, "
    "and none of them metered"
)

RESERVED_ENV: tuple[ReservedEnv, ...] = (
    ReservedEnv(
        "RAY_*", "Ray, KubeRay and the operator",
        "Ray's own configuration. KubeRay sets `RAY_AUTH_MODE` and `RAY_AUTH_TOKEN` from the "
        "cluster's authOptions only where the container has none, so a run's "
        "`RAY_AUTH_MODE=disabled` would turn token authentication off; it sets `RAY_ADDRESS` "
        "and `RAY_PORT` the same way, and `RAY_IP`, `RAY_CLUSTER_NAME`, "
        "`RAY_CLUSTER_NAMESPACE`, `RAY_CLOUD_INSTANCE_ID`, `RAY_NODE_TYPE_NAME`, "
        "`RAY_ENABLE_K8S_TOKEN_AUTH` and `RAY_USAGE_STATS_*`; the operator sets "
        "`RAY_JOB_STOP_WAIT_TIME_S` (the trainer's time to checkpoint); Ray reads every other "
        "`RAY_*` (`RAY_AUTH_TOKEN_PATH`, its timeouts, ports and flags)",
    ),
    ReservedEnv(
        "KUBERAY_*", "KubeRay",
        "`KUBERAY_GEN_RAY_START_CMD` is the `ray start` command KubeRay generated for the pod "
        "(its CPUs, memory, GPUs and addresses)",
    ),
    ReservedEnv("FQ_RAY_IP", "KubeRay", "the head's address a worker joins"),
    ReservedEnv(
        "GRPO_*", "the trainer and the driver",
        "their wiring: `GRPO_RUN_CONFIG` chooses the run config the trainer obeys (attempt, "
        "resume, budget), `GRPO_REPORT_KEY_PATH` and `GRPO_DRIVER_*` the driver's key and "
        "limits, and any `GRPO_*` variable they read later. `GRPO_TEST_*` stays open: the "
        "trainer's fault-injection hooks, which can only fail the run that sets them",
        open_prefix="GRPO_TEST_",
    ),
    ReservedEnv(
        "VLLM_RAY_BUNDLE_INDICES", "the trainer",
        "set per engine to place vLLM's tensor-parallel workers in the run's placement group",
    ),
    ReservedEnv("VLLM_RAY_PER_WORKER_GPUS", "the trainer",
                "set with `VLLM_RAY_BUNDLE_INDICES`"),
    ReservedEnv(
        "NVIDIA_*", "the NVIDIA container runtime",
        f"`NVIDIA_VISIBLE_DEVICES` (and the runtime's other `NVIDIA_*` variables) {_DEVICES}. "
        "Library settings of the same prefix (`NVIDIA_TF32_OVERRIDE`) belong in the image",
    ),
    ReservedEnv(
        "HOME", "the operator",
        "points into the pods' `/tmp`, an emptyDir: their root filesystem is read-only, and "
        "Ray, vLLM, torch and Hugging Face write their caches under the home",
    ),
    ReservedEnv("AMD_VISIBLE_DEVICES", "the AMD container runtime", _DEVICES),
    ReservedEnv("HABANA_VISIBLE_DEVICES", "the Habana container runtime", _DEVICES),
)


def reserved_env(name: str) -> ReservedEnv | None:
    """The entry of `RESERVED_ENV` that reserves ``name``, if any."""
    return next((r for r in RESERVED_ENV if r.covers(name)), None)


ENV_NAME_CEL = "!(" + " || ".join(r.cel() for r in RESERVED_ENV) + ")"
ENV_NAME_MESSAGE = (
    "name is reserved for the trainer, Ray, KubeRay or the container runtime: "
    + ", ".join(r.label for r in RESERVED_ENV)
)

RUN_SECRET_SUFFIXES: tuple[str, ...] = ("-ray-auth", "-report-key")
"""The operator's per-run Secrets, ``<run>-ray-auth`` (the Ray cluster's token) and
``<run>-report-key`` (the key that signs the run's reports). No run may name one, its own
included: its Ray pods would hold a token or a key that only its driver may hold."""
SIGNING_SECRET_SUFFIX = "-report-signing"
"""The operator's own Secret, ``<release>-report-signing`` as the chart names it, whose key every
run's report key derives from: a run in the operator's namespace could read it otherwise. (A
name the chart does not make is refused when the run is accepted: ``grpo_operator.acceptance``.)"""
RESERVED_SECRET_SUFFIXES = (*RUN_SECRET_SUFFIXES, SIGNING_SECRET_SUFFIX)
"""A user's own Secret with such a suffix is refused too: the name alone cannot tell them
apart."""


def names_reserved_secret(name: str) -> bool:
    return name.endswith(RESERVED_SECRET_SUFFIXES)


SECRET_NAME_CEL = " && ".join(f"!self.name.endsWith('{s}')" for s in RESERVED_SECRET_SUFFIXES)
SECRET_NAME_MESSAGE = (
    "name must not be a run's Ray auth or report-key Secret nor the operator's report-signing "
    "Secret: names ending in " + ", ".join(RESERVED_SECRET_SUFFIXES[:-1]) + " or "
    + RESERVED_SECRET_SUFFIXES[-1] + " are reserved"
)

NATIVE_RESOURCES: tuple[str, ...] = ("cpu", "memory")
"""Set from ``resources.worker``; an extra resource of the same name would override them."""
GPU_NAME_MARKS = ("*/gpu", "*/gpu.*", "*/mig-*", "gpu.*/*")
"""How a resource name that counts GPUs looks: `nvidia.com/gpu`, `amd.com/gpu`, shared or
time-sliced GPUs renamed `nvidia.com/gpu.shared`, MIG slices `nvidia.com/mig-1g.10gb`, Intel's
`gpu.intel.com/i915`."""


def extra_resource_refused(name: str, gpu_resource_name: str) -> bool:
    """Whether ``extraResources`` may not name ``name``: cpu, memory, or a name that counts GPUs
    (resource names hold at most one ``/``, so the tests below look at its two parts)."""
    return (
        name in NATIVE_RESOURCES
        or name == gpu_resource_name
        or name.endswith("/gpu")
        or "/gpu." in name
        or "/mig-" in name
        or name.startswith("gpu.")
    )


# extraResources has no default on the API server: an absent map has no keys to test.
EXTRA_RESOURCES_CEL = (
    "!has(self.extraResources) || !self.extraResources.exists(k, "
    + " || ".join(f"k == '{n}'" for n in NATIVE_RESOURCES)
    + " || k == self.gpuResourceName || k.endsWith('/gpu') || k.contains('/gpu.')"
    " || k.contains('/mig-') || k.startsWith('gpu.'))"
)
EXTRA_RESOURCES_MESSAGE = (
    "extraResources must not name cpu or memory (set worker instead), gpuResourceName or any "
    "other GPU resource (" + ", ".join(GPU_NAME_MARKS) + "): GPUs come only from "
    "gpusPerWorker, which the operator meters"
)
