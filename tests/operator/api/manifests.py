"""Test manifests: a valid base run, and a table of invalid ones with the field each names."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from grpo_operator.api.constants import API_VERSION, KIND

Manifest = dict[str, Any]


def base_manifest(name: str = "base-run") -> Manifest:
    """A small valid GRPORun touching most sections."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {
            "model": {
                "volume": {"persistentVolumeClaim": {"claimName": "models"}},
                "path": "tiny/model",
                "sha256": "a" * 64,
            },
            "dataset": {
                "volume": {"hostPath": {"path": "/data/sets"}},
                "trainFile": "gsm8k/train.parquet",
                "validationFile": "gsm8k/test.parquet",
            },
            "reward": {"name": "gsm8k"},
            "algorithm": {"maxSteps": 10, "groupSize": 4, "promptsPerStep": 8},
            "resources": {"image": "grpo-trainer:dev", "workers": 2, "gpusPerWorker": 4},
            "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "ckpt"}}},
        },
    }


def set_path(manifest: Manifest, path: str, value: Any) -> Manifest:
    """A copy with the dotted `path` set to `value` (DELETE removes it)."""
    out = copy.deepcopy(manifest)
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node.setdefault(key, {})
    if value is DELETE:
        node.pop(last, None)
    else:
        node[last] = value
    return out


DELETE = object()


@dataclass(frozen=True)
class Invalid:
    """An invalid manifest: `changes` applied to the base, refused naming `field`."""

    id: str
    changes: tuple[tuple[str, Any], ...]
    field: str

    def manifest(self, name: str = "base-run") -> Manifest:
        out = base_manifest(name)
        for path, value in self.changes:
            out = set_path(out, path, value)
        return out


def _one(id_: str, path: str, value: Any, field: str | None = None) -> Invalid:
    return Invalid(id_, ((path, value),), field or path.rsplit(".", 1)[-1])


A = "spec.algorithm"
R = "spec.resources"

INVALID: tuple[Invalid, ...] = (
    _one("name-too-long", "metadata.name", "r" * 41, "metadata.name"),
    _one("name-not-dns1035", "metadata.name", "1run", "metadata.name"),
    _one("name-with-dot", "metadata.name", "run.one", "metadata.name"),
    _one("missing-model", "spec.model", DELETE, "model"),
    _one("missing-train-file", "spec.dataset.trainFile", DELETE, "trainFile"),
    _one("missing-max-steps", f"{A}.maxSteps", DELETE, "maxSteps"),
    _one("missing-image", f"{R}.image", DELETE, "resources.image"),
    _one("unknown-field", f"{A}.groupsize", 8, "groupsize"),
    _one("group-size-1", f"{A}.groupSize", 1),
    _one("group-size-string", f"{A}.groupSize", "8", "groupSize"),
    _one("learning-rate-0", f"{A}.learningRate", 0),
    _one("learning-rate-negative", f"{A}.learningRate", -1e-6, "learningRate"),
    _one("clip-low-1", f"{A}.clipRatioLow", 1.0),
    _one("clip-high-0", f"{A}.clipRatioHigh", 0),
    _one("clip-c-1", f"{A}.clipRatioC", 1.0),
    _one("temperature-0", f"{A}.temperature", 0.0),
    _one("top-p-above-1", f"{A}.topP", 1.5),
    _one("prompt-tokens-0", f"{A}.maxPromptTokens", 0),
    _one("response-tokens-0", f"{A}.maxResponseTokens", 0),
    _one("ppo-epochs-0", f"{A}.ppoEpochs", 0),
    _one("kl-estimator-k4", f"{A}.klEstimator", "k4"),
    _one("loss-aggregation-sum", f"{A}.lossAggregation", "sum"),
    _one("mini-batch-not-dividing", f"{A}.miniBatchSize", 12, "miniBatchSize"),
    Invalid(
        "micro-batch-not-dividing",
        ((f"{A}.miniBatchSize", 16), (f"{A}.microBatchSize", 3)),
        "microBatchSize",
    ),
    Invalid(
        "eval-without-validation",
        (("spec.dataset.validationFile", DELETE), (f"{A}.evalIntervalSteps", 5)),
        "evalIntervalSteps",
    ),
    Invalid(
        "eval-prompts-without-validation",
        (("spec.dataset.validationFile", DELETE), (f"{A}.evalMaxPrompts", 5)),
        "evalMaxPrompts",
    ),
    _one("eval-samples-zero", f"{A}.evalSamples", 0, "evalSamples"),
    _one("learner-dtype-float16", "spec.learner.dtype", "float16", "dtype"),
    _one("gspo-with-token-mean", f"{A}.policyLoss", "gspo", "lossAggregation"),
    _one("reinforce-pp-with-group-std", f"{A}.advantageEstimator", "reinforce++-baseline",
         "advantageStdScope"),
    _one("overlong-buffer-over-max", f"{A}.overlongBufferTokens", 100_000,
         "overlongBufferTokens"),
    _one("unknown-policy-loss", f"{A}.policyLoss", "sapo", "policyLoss"),
    _one("unknown-advantage-estimator", f"{A}.advantageEstimator", "rloo++",
         "advantageEstimator"),
    _one("weight-decay-negative", f"{A}.weightDecay", -0.1, "weightDecay"),
    _one("adam-beta2-one", f"{A}.adamBeta2", 1.0, "adamBeta2"),
    _one("eval-samples-over", f"{A}.evalSamples", 65, "evalSamples"),
    _one(
        "validation-equals-train",
        "spec.dataset.validationFile",
        "gsm8k/train.parquet",
        "validationFile",
    ),
    _one("train-file-escapes", "spec.dataset.trainFile", "../train.parquet", "trainFile"),
    _one("train-file-not-parquet", "spec.dataset.trainFile", "train.csv", "trainFile"),
    _one("model-path-absolute", "spec.model.path", "/models/tiny", "model.path"),
    _one("host-path-relative", "spec.dataset.volume.hostPath.path", "data/sets", "hostPath.path"),
    _one("sha256-not-hex", "spec.model.sha256", "Z" * 64, "sha256"),
    _one(
        "volume-two-sources",
        "spec.model.volume.hostPath",
        {"path": "/m"},
        "persistentVolumeClaim or hostPath",
    ),
    _one("volume-no-source", "spec.checkpoint.volume", {}, "persistentVolumeClaim or hostPath"),
    _one("volume-empty-dir", "spec.checkpoint.volume", {"emptyDir": {}}, "emptyDir"),
    _one("reward-unknown", "spec.reward.name", "bleu", "reward.name"),
    _one("regex-without-pattern", "spec.reward", {"name": "regex"}, "pattern"),
    _one(
        "regex-without-named-group",
        "spec.reward",
        {"name": "regex", "pattern": r"(\d+)"},
        "pattern",
    ),
    _one(
        "regex-wrong-group",
        "spec.reward",
        {"name": "regex", "pattern": r"(?P<answer>\d+)", "group": "value"},
        "pattern",
    ),
    _one(
        "exact-match-with-pattern",
        "spec.reward",
        {"name": "exact_match", "pattern": "(?P<answer>x)"},
        "pattern",
    ),
    _one("gsm8k-with-case-sensitive", "spec.reward.caseSensitive", True, "caseSensitive"),
    _one(
        "tensor-parallel-not-dividing",
        "spec.rollout",
        {"tensorParallelSize": 3},
        "tensorParallelSize",
    ),
    _one(
        "gpu-memory-too-high",
        "spec.rollout",
        {"gpuMemoryUtilization": 0.99},
        "gpuMemoryUtilization",
    ),
    _one("placement-unknown", "spec.rollout", {"placement": "remote"}, "placement"),
    _one("max-model-len-too-small", "spec.rollout", {"maxModelLen": 1000}, "maxModelLen"),
    _one("gpus-negative", f"{R}.gpusPerWorker", -1, "gpusPerWorker"),
    _one("workers-0", f"{R}.workers", 0, "workers"),
    _one("image-with-space", f"{R}.image", "grpo trainer", "resources.image"),
    _one("memory-not-quantity", f"{R}.worker", {"cpu": "2", "memory": "lots"}, "memory"),
    _one("extra-resource-negative", f"{R}.extraResources", {"rdma/hca": -1}, "extraResources"),
    _one(
        "env-value-and-secret",
        f"{R}.env",
        [{"name": "A", "value": "1", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        "value or valueFrom",
    ),
    _one(
        "env-duplicate",
        f"{R}.env",
        [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}],
        "env",
    ),
    *(
        _one(f"env-reserved-{name.lower().replace('_', '-')}", f"{R}.env",
             [{"name": name, "value": "1"}], "resources.env")
        for name in ("RAY_AUTH_MODE", "RAY_ADDRESS", "KUBERAY_GEN_RAY_START_CMD", "FQ_RAY_IP",
                     "GRPO_RUN_CONFIG", "GRPO_REPORT_KEY_PATH", "VLLM_RAY_BUNDLE_INDICES",
                     "NVIDIA_VISIBLE_DEVICES", "AMD_VISIBLE_DEVICES")
    ),
    *(
        _one(f"env-secret{suffix}", f"{R}.env",
             [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": f"other{suffix}",
                                                               "key": "k"}}}],
             "secretKeyRef")
        for suffix in ("-ray-auth", "-report-key", "-report-signing")
    ),
    _one("pull-secret-report-key", f"{R}.imagePullSecrets", [{"name": "other-report-key"}],
         "imagePullSecrets"),
    *(
        _one(f"extra-resource-{name.replace('/', '-').replace('.', '-')}", f"{R}.extraResources",
             {name: 1}, "extraResources")
        for name in ("nvidia.com/gpu", "amd.com/gpu", "nvidia.com/gpu.shared",
                     "nvidia.com/mig-1g.10gb", "gpu.intel.com/i915", "cpu", "memory")
    ),
    Invalid(
        "extra-resource-is-the-gpu-resource",
        ((f"{R}.gpuResourceName", "habana.ai/gaudi"), (f"{R}.extraResources",
                                                      {"habana.ai/gaudi": 8})),
        "extraResources",
    ),
    _one("gpu-resource-name-memory", f"{R}.gpuResourceName", "memory", "gpuResourceName"),
    _one(
        "toleration-exists-with-value",
        f"{R}.tolerations",
        [{"key": "gpu", "operator": "Exists", "value": "x"}],
        "tolerations",
    ),
    _one("interval-steps-0", "spec.checkpoint.intervalSteps", 0, "intervalSteps"),
    _one("keep-0", "spec.checkpoint.keep", 0, "checkpoint.keep"),
    _one("max-restarts-negative", "spec.runPolicy", {"maxRestarts": -1}, "maxRestarts"),
    _one("suspend-string", "spec.runPolicy", {"suspend": "yes"}, "suspend"),
    _one("queue-name-uppercase", "spec.runPolicy", {"queueName": "TeamA"}, "queueName"),
    _one(
        "ttl-negative", "spec.runPolicy", {"ttlSecondsAfterFinished": -5}, "ttlSecondsAfterFinished"
    ),
    _one(
        "granularity-unknown",
        "spec.runPolicy",
        {"recoveryGranularity": "token"},
        "recoveryGranularity",
    ),
    _one("deadline-0", "spec.budget", {"activeDeadlineSeconds": 0}, "activeDeadlineSeconds"),
    _one(
        "pre-running-deadline-0",
        "spec.budget",
        {"preRunningDeadlineSeconds": 0},
        "preRunningDeadlineSeconds",
    ),
    _one("gpu-hours-0", "spec.budget", {"maxGPUHours": 0}, "maxGPUHours"),
    _one("generated-tokens-0", "spec.budget", {"maxGeneratedTokens": 0}, "maxGeneratedTokens"),
)
