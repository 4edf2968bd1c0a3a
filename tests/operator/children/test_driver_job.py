"""The driver Job as the builder makes it (pure, no cluster): what its container declares agrees
with what the driver in it does."""

from __future__ import annotations

from pathlib import Path

import yaml

from grpo_operator.api.spec import validate_manifest
from grpo_operator.children.driver_job import DRIVER_CONTAINER, driver_job
from grpo_operator.children.meta import RunRef
from grpo_trainer.driver import settings

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "tiny-cpu.yaml"


def _driver_container() -> dict:
    spec = validate_manifest(yaml.safe_load(EXAMPLE.read_text())).spec
    job = driver_job(spec, RunRef("tiny-cpu", "default", "uid-1"), attempt=1)
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["name"] == DRIVER_CONTAINER
    return container


def test_the_metrics_port_is_declared_where_the_driver_serves_it():
    container = _driver_container()
    env = {var["name"]: var["value"] for var in container["env"]}

    [port] = container["ports"]

    assert port == {"name": "metrics", "containerPort": settings.default_metrics_port(env),
                    "protocol": "TCP"}
    assert port["containerPort"] != 0
