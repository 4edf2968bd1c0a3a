"""The local control plane used by the tests, ``make cluster-up`` and ``make demo``."""

from .cluster import LocalCluster

__all__ = ["LocalCluster"]
