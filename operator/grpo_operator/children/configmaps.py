"""The run-config ConfigMap (what the trainer is told) and the report ConfigMap (what the
trainer tells)."""

from __future__ import annotations

from typing import Any

from grpo_operator.api.run_config import RUN_CONFIG_KEY, RunConfig
from grpo_operator.children.meta import RunRef, child_metadata
from grpo_operator.naming import ChildNames


def run_config_map(run: RunRef, config: RunConfig) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(run, ChildNames(run.name).run_config_map, "run-config"),
        "data": {RUN_CONFIG_KEY: config.to_json()},
    }


def report_config_map(run: RunRef) -> dict[str, Any]:
    """Empty until the trainer's first report replaces its key."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(run, ChildNames(run.name).report_config_map, "report"),
        "data": {},
    }
