"""The RayCluster builder's lifecycle parts: the Ray pods' preStop hook."""

from __future__ import annotations

from pathlib import Path

import yaml

from grpo_operator.api.spec import validate_manifest
from grpo_operator.children.driver_job import driver_job
from grpo_operator.children.meta import RunRef
from grpo_operator.children.raycluster import ray_cluster
from grpo_trainer.__main__ import build_parser
from grpo_trainer.driver import drain

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "tiny-cpu.yaml"
RUN = RunRef("tiny-cpu", "default", "uid-1")


def test_every_ray_pod_drains_its_jobs_before_it_goes_and_the_driver_does_not():
    spec = validate_manifest(yaml.safe_load(EXAMPLE.read_text())).spec
    rc = ray_cluster(spec, RUN)["spec"]
    (workers,) = rc["workerGroupSpecs"]
    for template in (rc["headGroupSpec"]["template"], workers["template"]):
        pod = template["spec"]
        (container,) = pod["containers"]
        command = container["lifecycle"]["preStop"]["exec"]["command"]
        assert command[:3] == ["python", "-m", "grpo_trainer"]
        # The image's own command line knows it.
        assert build_parser().parse_args(command[3:]).handler is drain.handle
        # The grace period bounds hook and shutdown together; Ray waits that long for the
        # stopped trainer before SIGKILL.
        assert pod["terminationGracePeriodSeconds"] == 30
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["RAY_JOB_STOP_WAIT_TIME_S"] == "30"
    driver = driver_job(spec, RUN, attempt=1)["spec"]["template"]["spec"]["containers"][0]
    assert "lifecycle" not in driver  # it stops the job on SIGTERM itself
