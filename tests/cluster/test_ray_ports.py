"""The ports a local Ray node is started with: Ray refuses to start when its worker range holds
a port of one of its own components (GCS, client server, dashboard, agents)."""

from __future__ import annotations

import random

from localcluster import ray_node


def test_the_worker_range_holds_no_port_of_the_nodes_components(monkeypatch):
    # A narrow range makes a collision likely on every draw, were one allowed.
    monkeypatch.setattr(ray_node, "_PORT_RANGE", (40000, 41000))
    random.seed(0)
    for _ in range(200):
        ports, worker_low = ray_node._reserve_ports("127.0.0.1", 9, taken={40500})
        workers = set(range(worker_low, worker_low + ray_node._WORKER_PORTS))
        assert len(set(ports)) == 9
        assert 40500 not in ports
        assert not workers & {*ports, 40500}
