"""Running the driver (`python -m grpo_trainer submit`) as a subprocess against a real local
Ray head, as in its pod, with tiny Python scripts as "trainers" (``--entrypoint``). Each `Run`
has its own run name, so jobs on a shared head never collide."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

from ray.job_submission import JobSubmissionClient

from grpo_operator.api.run_config import ResumeMode, RunConfig
from grpo_operator.api.spec import validate_manifest
from grpo_trainer.driver import settings
from localcluster.ray_node import RayNode

DRIVER_TIMEOUT = 120  # a bound on any driver run, not a benchmark

MANIFEST = {
    "apiVersion": "grpo.dev/v1alpha1",
    "kind": "GRPORun",
    "metadata": {"name": "driver-test"},
    "spec": {
        "model": {"volume": {"persistentVolumeClaim": {"claimName": "models"}}, "path": "tiny"},
        "dataset": {
            "volume": {"persistentVolumeClaim": {"claimName": "data"}},
            "trainFile": "train.parquet",
        },
        "reward": {"name": "gsm8k"},
        "algorithm": {"maxSteps": 2, "groupSize": 2, "promptsPerStep": 2},
        "resources": {"image": "grpo-trainer:dev", "workers": 1, "gpusPerWorker": 0},
        "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "ckpt"}}},
    },
}


class Run:
    """One test's run: its config file, its trainer scripts, its drivers."""

    def __init__(self, head: RayNode, tmp_path: Path, attempt: int = 1):
        self.head = head
        self.dir = tmp_path
        self.name = f"drv-{uuid.uuid4().hex[:8]}"
        self.uid = str(uuid.uuid4())
        self.config = self.config_for(attempt)

    def config_for(self, attempt: int) -> Path:
        config = RunConfig.build(
            spec=validate_manifest(MANIFEST).spec, name=self.name, namespace="ns", uid=self.uid,
            attempt=attempt, resume=ResumeMode.NONE, report_config_map=f"{self.name}-report",
        )
        path = self.dir / f"run-config-a{attempt}.json"
        path.write_text(config.to_json())
        return path

    def trainer(self, body: str) -> str:
        """An entrypoint running ``body`` (Python) with the venv's interpreter."""
        script = self.dir / f"trainer-{uuid.uuid4().hex[:6]}.py"
        script.write_text(textwrap.dedent(body))
        return f"{sys.executable} {script}"

    def argv(self, entrypoint: str, *extra: str, config: Path | None = None) -> list[str]:
        return [
            sys.executable, "-m", "grpo_trainer", "submit",
            "--config", str(config or self.config), "--entrypoint", entrypoint,
            "--poll-interval", "0.5", *extra,
        ]

    def env(self, **overrides: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env.update(RAY_ADDRESS=self.head.address, RAY_AUTH_TOKEN_PATH=str(self.head.token_file))
        # Drivers share this machine's network: none listens on the fixed metrics port unless
        # a test asks for an endpoint (--metrics-port).
        env[settings.METRICS_PORT_ENV] = "0"
        env.update(overrides)
        return env

    def submit(self, entrypoint: str, *extra: str, config: Path | None = None,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.argv(entrypoint, *extra, config=config), env=env or self.env(),
            capture_output=True, text=True, timeout=DRIVER_TIMEOUT,
        )

    def start(self, entrypoint: str, label: str, *extra: str,
              config: Path | None = None) -> Driver:
        return Driver(self.argv(entrypoint, *extra, config=config), self.env(), self.dir / label)

    def jobs(self) -> list:
        """This run's jobs on the head."""
        return [j for j in jobs_client(self.head).list_jobs()
                if (j.submission_id or "").startswith(f"{self.name}-a")]

    def job(self, attempt: int = 1):
        return jobs_client(self.head).get_job_info(f"{self.name}-a{attempt}")


class Driver:
    """A driver subprocess whose output goes to files (so it never blocks on a full pipe)."""

    def __init__(self, argv: list[str], env: dict[str, str], prefix: Path):
        self.stdout_path = prefix.with_suffix(".out")
        self.stderr_path = prefix.with_suffix(".err")
        with self.stdout_path.open("w") as out, self.stderr_path.open("w") as err:
            self.popen = subprocess.Popen(argv, env=env, stdout=out, stderr=err)

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text()

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def wait(self) -> int:
        try:
            return self.popen.wait(DRIVER_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            raise AssertionError(
                f"driver still running after {DRIVER_TIMEOUT}s:\n{self.stderr}"
            ) from None


def jobs_client(head: RayNode) -> JobSubmissionClient:
    return JobSubmissionClient(head.address, headers={"Authorization": f"Bearer {head.token}"})

