"""How learner ranks share a model and combine gradients: one interface, two backends.

- CPU (``gloo``): every rank holds a full replica; after the micro-batches of a mini-batch the
  gradients are flattened and all-reduced with SUM. The loss already divides by the global
  token/sequence counts (``docs/algorithm.md``), so the sum is the mini-batch's gradient.
- GPU (``nccl``, written but NOT run on this machine — no GPU here): FSDP2 ``fully_shard`` on
  each decoder layer and on the root. FSDP averages gradients over ranks, so the loss is scaled
  by the world size to turn that average back into the sum (verl's ``dp_size`` factor).

Mixed precision (``compute_dtype`` bfloat16) keeps float32 master weights, gradients and
optimizer state and computes in bfloat16: FSDP2's ``MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32)`` on sharded GPU ranks (verl's actor default), ``torch.autocast`` around the
forward everywhere else (one GPU, CPUs). The reference model is wrapped the same way: sharded
like the policy on GPUs, never a full copy per GPU.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from grpo_trainer.learner.model import autocast_forward


class DataParallel:
    """The data-parallel strategy of one learner rank (after ``init_process_group``)."""

    def __init__(self, use_gpu: bool, compute_dtype: torch.dtype = torch.float32) -> None:
        self.use_gpu = use_gpu
        self.compute_dtype = compute_dtype
        self.world_size = dist.get_world_size() if dist.is_initialized() else 1
        self.rank = dist.get_rank() if dist.is_initialized() else 0

    @property
    def loss_scale(self) -> float:
        """Factor on each micro-batch loss before backward (see module docstring)."""
        return float(self.world_size) if self.use_gpu else 1.0

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """Shard the model with FSDP2 on GPUs (the CPU path keeps the replica as is) and set
        its compute dtype (see the module docstring)."""
        mixed = self.compute_dtype != torch.float32
        if not self.use_gpu or self.world_size == 1:
            if mixed:
                autocast_forward(model, "cuda" if self.use_gpu else "cpu", self.compute_dtype)
            return model
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=self.compute_dtype,
                                      reduce_dtype=torch.float32) if mixed else None
        options = {"mp_policy": policy} if policy else {}
        for layer in model.model.layers:
            fully_shard(layer, **options)
        fully_shard(model, **options)
        return model

    def all_reduce_sum(self, tensor: Tensor) -> Tensor:
        """SUM across ranks (the tensor itself for one rank)."""
        return self._all_reduce(tensor, dist.ReduceOp.SUM)

    def all_reduce_max(self, tensor: Tensor) -> Tensor:
        """MAX across ranks (the tensor itself for one rank)."""
        return self._all_reduce(tensor, dist.ReduceOp.MAX)

    def _all_reduce(self, tensor: Tensor, op: dist.ReduceOp) -> Tensor:
        """Reduced on the backend's device (NCCL reduces CUDA tensors only), returned on the
        tensor's own."""
        if self.world_size == 1:
            return tensor
        reduced = tensor.cuda() if self.use_gpu else tensor
        dist.all_reduce(reduced, op=op)
        return reduced.to(tensor.device)

    def reduce_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Sum the accumulated gradients over ranks (CPU replicas; FSDP already reduced)."""
        if self.use_gpu or self.world_size == 1:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for p, g in zip(params, grads, strict=True):
            p.grad = flat[offset : offset + g.numel()].view_as(g).clone()
            offset += g.numel()

    def full_state_dict(self, model: torch.nn.Module) -> dict[str, Tensor]:
        """The HF-named full state dict on CPU (every rank calls; FSDP gathers collectively)."""
        if self.use_gpu and self.world_size > 1:
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                get_model_state_dict,
            )

            options = StateDictOptions(full_state_dict=True, cpu_offload=True)
            return get_model_state_dict(model, options=options)
        return {name: t.detach().cpu() for name, t in model.state_dict().items()}

    def load_full_state_dict(self, model: torch.nn.Module, state: dict[str, Tensor]) -> None:
        """Load an HF-named full state dict (every rank calls). A tied output embedding that
        ``save_pretrained`` left out is the only key allowed to be missing."""
        if self.use_gpu and self.world_size > 1:
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                set_model_state_dict,
            )

            set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))
            return
        missing, unexpected = model.load_state_dict(state, strict=False)
        tied = getattr(model.config, "tie_word_embeddings", False)
        if unexpected or any(not (tied and k.endswith("lm_head.weight")) for k in missing):
            raise ValueError(f"checkpoint weights do not fit the model: missing {missing}, "
                             f"unexpected {unexpected}")
