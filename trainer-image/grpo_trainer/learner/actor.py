"""A learner rank: one Ray actor holding the policy, its optimizer and the frozen reference.

All ranks of a group run ``torch.distributed`` together (gloo on CPUs, NCCL with FSDP on GPUs;
see ``learner.parallel``). The driver calls every rank with its own shard of the step's batch
and reads the (all-reduced, hence identical) metrics from any of them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch
import torch.distributed as dist
from torch import Tensor

from grpo_operator.api.checkpoint_layout import MODEL_SUBDIR
from grpo_trainer.algorithm_settings import AlgorithmSettings
from grpo_trainer.batch import WireBatch, from_wire
from grpo_trainer.cores import pod_cores
from grpo_trainer.learner.forward import batched_logprobs
from grpo_trainer.learner.model import COMPUTE_DTYPES, load_model
from grpo_trainer.learner.parallel import DataParallel
from grpo_trainer.learner.update import UpdatePlan, update_policy
from grpo_trainer.rendezvous import join_store, serve_store
from grpo_trainer.rollout.weight_sync import WeightSender, sync_specs
from grpo_trainer.rollout.weight_transport import (
    GroupAddress,
    node_ip,
    open_weight_group,
    serve_weight_group,
)

LEARNER_SUBDIR = "learner"
"""A checkpoint's per-rank optimizer and RNG states (``rank_<r>.pt``)."""
T = TypeVar("T")
TEST_DROP_WEIGHT_ENV = "GRPO_TEST_DROP_WEIGHT"
"""Test hook (see ``LearnerRank.weight_group_address``)."""


@dataclass(frozen=True)
class LearnerSettings:
    """What every rank needs to build its model and optimizer."""

    model_dir: str
    algorithm: AlgorithmSettings
    learning_rate: float
    seed: int
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    use_gpu: bool = False
    compute_dtype: str = "float32"  # bfloat16: mixed precision over float32 master weights
    gradient_checkpointing: bool = False

    @classmethod
    def from_spec(cls, spec, model_dir: str, algorithm: AlgorithmSettings,
                  use_gpu: bool = False) -> LearnerSettings:
        """From a contract ``GRPORunSpec`` (``algorithm``: its settings, already built)."""
        a = spec.algorithm
        return cls(model_dir=model_dir, algorithm=algorithm, learning_rate=a.learning_rate,
                   seed=a.seed, weight_decay=a.weight_decay, betas=(a.adam_beta1, a.adam_beta2),
                   use_gpu=use_gpu, compute_dtype=spec.learner.dtype.value,
                   gradient_checkpointing=spec.learner.gradient_checkpointing)


def cpu_threads_per_rank(ranks_on_pod: int) -> int:
    """Torch threads for a CPU rank: its share of its pod's cores with the other ranks there.
    Ray starts an actor with a fractional CPU request with ``OMP_NUM_THREADS=1``, but on the CPU
    the engine and the ranks take turns (the engine idles while the ranks update), so one
    thread would leave cores idle through every update."""
    return max(1, len(pod_cores()) // ranks_on_pod)


def _ranks_on_my_node() -> int:
    """How many ranks of the group share this rank's Ray node (its pod), by asking them all:
    the placement may put one rank on each pod or several on one."""
    import ray

    mine = ray.get_runtime_context().get_node_id()
    nodes: list[str | None] = [None] * dist.get_world_size()
    dist.all_gather_object(nodes, mine)
    return nodes.count(mine)


class LearnerRank:
    """One data-parallel rank (instantiate through ``ray.remote``)."""

    def __init__(self, rank: int, world_size: int, settings: LearnerSettings) -> None:
        self.rank = rank
        self.world_size = world_size
        self.settings = settings

    def serve_rendezvous(self) -> tuple[str, int]:
        """Rank 0: serve the group's store on this node's IP (a pod's hostname need not
        resolve) and say where."""
        ip = node_ip()
        self._store = serve_store(ip, self.world_size)
        return ip, self._store.port

    def setup(self, master_addr: str, master_port: int) -> None:
        """Join the process group, load the policy (and reference), build AdamW."""
        store = self._store if self.rank == 0 else join_store(
            master_addr, master_port, self.world_size)
        backend = "nccl" if self.settings.use_gpu else "gloo"
        # The collectives keep torch's default timeout: only the meeting is bounded here.
        dist.init_process_group(backend, store=store, rank=self.rank, world_size=self.world_size)
        if not self.settings.use_gpu:
            torch.set_num_threads(cpu_threads_per_rank(_ranks_on_my_node()))
        torch.manual_seed(self.settings.seed)
        self.device = torch.device("cuda" if self.settings.use_gpu else "cpu")
        s = self.settings
        self.dp = DataParallel(s.use_gpu, COMPUTE_DTYPES[s.compute_dtype])
        self.model = self.dp.wrap(load_model(s.model_dir, self.device, trainable=True,
                                             gradient_checkpointing=s.gradient_checkpointing))
        self.reference = (self.dp.wrap(load_model(s.model_dir, self.device, trainable=False))
                          if s.algorithm.kl_coef > 0 else None)
        self.optimizer = torch.optim.AdamW(
            [p for p in self.model.parameters() if p.requires_grad],
            lr=s.learning_rate, betas=s.betas, weight_decay=s.weight_decay,
        )

    def _on_device(self, wire: WireBatch) -> dict[str, Tensor]:
        return {k: v.to(self.device) for k, v in from_wire(wire).items()}

    def update(self, shard: WireBatch, plan: UpdatePlan) -> dict[str, float]:
        """Old-policy (and reference) logprobs, then the epochs of updates on ``shard``; the
        metrics carry each pass's seconds (``time_old_logprobs_s`` and ``time_ref_logprobs_s``
        only for the passes that ran, ``time_update_s``)."""
        shard = self._on_device(shard)
        temperature = self.settings.algorithm.temperature
        times: dict[str, float] = {}
        # Old-policy logprobs come from the learner itself (detached); the engine's only feed the
        # mismatch metric and its parity guard. With one optimizer step per batch the policy has
        # not moved when the update's own forward runs, so that forward supplies them
        # (``update_policy``) and a whole no-grad pass is saved.
        if not plan.single_step(shard["input_ids"].shape[0]):
            shard["old_log_prob"], times["time_old_logprobs_s"] = self._timed(
                lambda: batched_logprobs(self.model, shard, temperature, plan.micro_batch_size))
        if self.reference is not None:
            shard["ref_log_prob"], times["time_ref_logprobs_s"] = self._timed(
                lambda: batched_logprobs(self.reference, shard, temperature,
                                         plan.micro_batch_size))
        metrics, times["time_update_s"] = self._timed(lambda: update_policy(
            self.model, self.optimizer, shard, plan, self.settings.algorithm, self.dp))
        return {**metrics, **times}

    def _timed(self, work: Callable[[], T]) -> tuple[T, float]:
        """``work()`` and its seconds (on a GPU, until its kernels are done: they run
        asynchronously)."""
        start = time.perf_counter()
        result = work()
        if self.settings.use_gpu:
            torch.cuda.synchronize()
        return result, time.perf_counter() - start

    def logprobs(self, batch: WireBatch, reference: bool = False) -> Tensor:
        """(N, Tr) logprobs of ``batch``'s responses under the policy or the reference."""
        model = self.reference if reference else self.model
        if model is None:
            raise ValueError("no reference model (klCoef is 0)")
        out = batched_logprobs(
            model, self._on_device(batch), self.settings.algorithm.temperature, 64
        )
        return out.cpu()

    def weight_group_address(self, world_size: int) -> tuple[GroupAddress, list]:
        """Rank 0: where the weight group meets (a store it now serves on this node's IP) and
        the (name, dtype, shape) list of what every sync will send."""
        # Test hook, for fault injection only (nothing else reads it): the HF parameter named
        # here is left out of every sync, so that a test (through the GRPORun's resources.env)
        # can show the engine refusing an incomplete sync.
        drop = os.environ.get(TEST_DROP_WEIGHT_ENV)
        self._weight_specs = sync_specs(self.model, drop=drop)
        address, self._weight_store = serve_weight_group(
            node_ip(), world_size, self.settings.use_gpu)
        return address, [spec.to_wire() for spec in self._weight_specs]

    def join_weight_group(self, address: GroupAddress) -> None:
        """Rank 0: join the weight group as its rank 0 (returns once the engines have joined)."""
        group = open_weight_group(address, 0, address.host, self._weight_store)
        self._weight_sender = WeightSender(self._weight_specs, group)

    def send_weights(self) -> None:
        """Every rank calls (FSDP gathers the full state dict collectively); rank 0 broadcasts
        it to the engines, which receive at the same time."""
        state = self.dp.full_state_dict(self.model)
        if self.rank == 0:
            self._weight_sender.send(state)

    def state(self) -> dict[str, Tensor]:
        """A CPU copy of the policy's parameters (tests compare ranks and steps)."""
        return {k: v.detach().cpu().clone() for k, v in self.model.named_parameters()}

    def save_model(self, out_dir: str) -> str | None:
        """Every rank calls; rank 0 writes an HF directory (config, safetensors, tokenizer)."""
        state = self.dp.full_state_dict(self.model)
        return self._write_hf(Path(out_dir), state) if self.rank == 0 else None

    def _write_hf(self, out: Path, state: dict[str, Tensor]) -> str:
        from transformers import AutoTokenizer

        out.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(out, state_dict=state, safe_serialization=True)
        AutoTokenizer.from_pretrained(self.settings.model_dir).save_pretrained(out)
        return str(out)

    def save_state(self, checkpoint_dir: str) -> None:
        """Every rank calls: rank 0 writes ``model/`` (HF directory), every rank its optimizer
        state and RNG states to ``learner/rank_<r>.pt``."""
        root = Path(checkpoint_dir)
        state = self.dp.full_state_dict(self.model)
        if self.rank == 0:
            self._write_hf(root / MODEL_SUBDIR, state)
        (root / LEARNER_SUBDIR).mkdir(parents=True, exist_ok=True)
        rng = {"torch": torch.get_rng_state()}
        if self.settings.use_gpu:
            rng["cuda"] = torch.cuda.get_rng_state()
        torch.save(
            {"world_size": self.world_size, "optimizer": self.optimizer.state_dict(), "rng": rng},
            root / LEARNER_SUBDIR / f"rank_{self.rank}.pt",
        )

    def load_state(self, checkpoint_dir: str) -> None:
        """Every rank calls: the policy from ``model/``, this rank's optimizer and RNG. CPU
        replicas hold identical optimizer states, so a changed world size takes rank 0's."""
        from safetensors.torch import load_file

        root = Path(checkpoint_dir)
        state: dict[str, Tensor] = {}
        for path in sorted((root / MODEL_SUBDIR).glob("*.safetensors")):
            state.update(load_file(path))
        self.dp.load_full_state_dict(self.model, state)
        path = root / LEARNER_SUBDIR / f"rank_{self.rank}.pt"
        saved = torch.load(path if path.exists() else root / LEARNER_SUBDIR / "rank_0.pt",
                           weights_only=False)
        if saved["world_size"] != self.world_size and self.settings.use_gpu:
            raise ValueError(f"checkpoint of {saved['world_size']} sharded learner ranks "
                             f"cannot resume {self.world_size}")
        self.optimizer.load_state_dict(saved["optimizer"])
        torch.set_rng_state(saved["rng"]["torch"])
        if self.settings.use_gpu and "cuda" in saved["rng"]:
            torch.cuda.set_rng_state(saved["rng"]["cuda"])

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
