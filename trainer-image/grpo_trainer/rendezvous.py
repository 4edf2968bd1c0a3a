"""Where a process group's members meet: rank 0's ``TCPStore``, on a port no one else can take.

Rank 0 listens first, on port 0, and only then says where (``store.port``). Finding a free port,
closing it and binding it again later leaves a gap in which the kernel can hand the same port to
another process's bind, or to an outgoing connection as its ephemeral port (Ray's and gloo's
connections take many); the store then fails with EADDRINUSE, or the members meet the wrong
server. The learners' default group and the weight group both meet this way.
"""

from __future__ import annotations

import datetime

import torch.distributed as dist

RENDEZVOUS_TIMEOUT = datetime.timedelta(minutes=10)
"""How long a member waits for the others to reach the store (and for a store operation)."""


def serve_store(host: str, world_size: int,
                timeout: datetime.timedelta = RENDEZVOUS_TIMEOUT) -> dist.TCPStore:
    """Rank 0's store, already listening (on every interface of its node); the members reach
    it at ``(host, store.port)``."""
    return dist.TCPStore(host, 0, world_size, is_master=True, timeout=timeout,
                         wait_for_workers=False)


def join_store(host: str, port: int, world_size: int,
               timeout: datetime.timedelta = RENDEZVOUS_TIMEOUT) -> dist.TCPStore:
    """Another rank's client of rank 0's store (it retries connecting until ``timeout``)."""
    return dist.TCPStore(host, port, world_size, is_master=False, timeout=timeout)
