"""The process group that carries weights from learner rank 0 to the vLLM engines' workers.

A group of its own, apart from torch.distributed's default group (the learners' gradients) and
from vLLM's (an engine's tensor parallelism): learner rank 0 is rank 0 and hosts the
rendezvous store on its node's IP; engine worker ``w`` of engine ``e`` is rank
``1 + e * workers_per_engine + w``. The trainer builds it once, when the learners and the
engines both exist, and every sync reuses it. Only ``broadcast`` from rank 0 is needed.

Rank 0 serves the rendezvous store before it says where (``serve_weight_group``,
``grpo_trainer.rendezvous``); the others connect to it.

- CPU (ran here): ``torch.distributed.TCPStore`` + ``ProcessGroupGloo``. Every member binds its
  gloo device to its own node's IP (``ProcessGroupGloo.create_device(hostname=<ip>)``): the
  default device resolves the node's hostname, which Kubernetes pod hostnames often do not,
  and ``GLOO_SOCKET_IFNAME`` would have to name the same interface on every pod.
- GPU (written, NOT run here: no GPU): vLLM's ``StatelessProcessGroup`` + ``PyNcclCommunicator``,
  as in vLLM's RLHF example, verl and OpenRLHF.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import torch
import torch.distributed as dist

from grpo_trainer.rendezvous import join_store, serve_store

GROUP_TIMEOUT = datetime.timedelta(minutes=10)
"""How long a member waits for the others (rendezvous, a broadcast): a 7B model's bucket over a
slow link takes seconds; a peer that never comes is a failed attempt, not a hang."""


@dataclass(frozen=True)
class GroupAddress:
    """Where the weight group meets: rank 0's store, and who is in it."""

    host: str  # learner rank 0's node IP
    port: int
    world_size: int  # 1 + every engine worker
    use_gpu: bool  # NCCL on CUDA tensors, else gloo on CPU tensors


def node_ip() -> str:
    """This Ray node's IP (call it in a Ray worker: outside one, Ray guesses by routing)."""
    import ray

    return ray.util.get_node_ip_address()


def serve_weight_group(host: str, world_size: int,
                       use_gpu: bool) -> tuple[GroupAddress, dist.TCPStore]:
    """Rank 0: the group's store, already listening, and the address members join at (its
    port on ``host``)."""
    store = serve_store(host, world_size, GROUP_TIMEOUT)
    return GroupAddress(host, store.port, world_size, use_gpu), store


class GlooWeightGroup:
    """CPU: a stateless gloo group; tensors are broadcast where they are (CPU memory)."""

    device = torch.device("cpu")

    def __init__(self, store: dist.TCPStore, address: GroupAddress, rank: int,
                 bind_ip: str) -> None:
        from torch.distributed import ProcessGroupGloo

        self.store = store
        options = ProcessGroupGloo._Options()
        options._devices = [ProcessGroupGloo.create_device(hostname=bind_ip)]
        options._timeout = GROUP_TIMEOUT
        # Blocks until every rank has joined (gloo connects the full mesh here).
        self.group = ProcessGroupGloo(store, rank, address.world_size, options)

    def broadcast(self, tensor: torch.Tensor) -> None:
        """``tensor`` from rank 0 into every rank's ``tensor``, in place."""
        self.group.broadcast(tensor, 0).wait()

    def finish(self) -> None:
        """Gloo's broadcast is complete when ``wait`` returns."""


class NcclWeightGroup:
    """GPU (NOT run here): a stateless NCCL group on this process's current CUDA device."""

    def __init__(self, store: dist.TCPStore, address: GroupAddress, rank: int,
                 bind_ip: str) -> None:
        del bind_ip  # NCCL picks its interface itself (NCCL_SOCKET_IFNAME)
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
        from vllm.distributed.utils import StatelessProcessGroup

        # Indexed: the communicator refuses tensors on any other device object than its own.
        self.device = torch.device("cuda", torch.cuda.current_device())

        # Built on the store we already hold (``StatelessProcessGroup.create`` would bind the
        # port itself, after the address had been given out).
        group = StatelessProcessGroup(rank=rank, world_size=address.world_size, store=store)
        self.group = PyNcclCommunicator(group, device=self.device)

    def broadcast(self, tensor: torch.Tensor) -> None:
        """``tensor`` (CUDA) from rank 0 into every rank's, queued on the current stream."""
        self.group.broadcast(tensor, src=0, stream=torch.cuda.current_stream())

    def finish(self) -> None:
        """Wait for the queued broadcasts."""
        torch.cuda.synchronize()


def open_weight_group(address: GroupAddress, rank: int, bind_ip: str,
                      store: dist.TCPStore | None = None):
    """Join the weight group as ``rank`` (every member calls it at the same time). Rank 0 passes
    the store it serves (``serve_weight_group``); the others connect to it, retrying until the
    group's timeout."""
    if store is None:
        store = join_store(address.host, address.port, address.world_size, GROUP_TIMEOUT)
    kind = NcclWeightGroup if address.use_gpu else GlooWeightGroup
    return kind(store, address, rank, bind_ip)
