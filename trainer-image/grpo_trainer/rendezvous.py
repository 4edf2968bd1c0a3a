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


def serve_store(host: str, world_size: int, timeout: datetime.timedelta) -> dist.TCPStore:
    """Rank 0's store, already listening; its address is ``(host, store.port)``."""
    return dist.TCPStore(host, 0, world_size, is_master=True, timeout=timeout,
                         wait_for_workers=False)


def join_store(host: str, port: int, world_size: int,
               timeout: datetime.timedelta) -> dist.TCPStore:
    """Another rank's client of rank 0's store (it retries connecting until ``timeout``)."""
    return dist.TCPStore(host, port, world_size, is_master=False, timeout=timeout)
