"""``python -m grpo_operator``: run the operator against the current kubeconfig or in-cluster.

Namespaces: ``WATCH_NAMESPACES`` (comma-separated) limits the operator to those; unset, it
watches the whole cluster. ``--liveness`` serves kopf's probe endpoint (``/healthz``).
"""

from __future__ import annotations

import argparse
import asyncio
import os

import kopf

import grpo_operator.main  # noqa: F401 - registers the handlers
from grpo_operator import settings


def main() -> None:
    parser = argparse.ArgumentParser(prog="grpo_operator")
    parser.add_argument("--liveness", default=os.environ.get("GRPO_LIVENESS"),
                        help="e.g. http://0.0.0.0:8080/healthz")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    kopf.configure(verbose=args.verbose, log_prefix=True)
    namespaces = list(settings.from_env().namespaces)
    asyncio.run(
        kopf.operator(
            standalone=True,
            clusterwide=not namespaces,
            namespaces=namespaces,
            liveness_endpoint=args.liveness,
        )
    )


if __name__ == "__main__":
    main()
