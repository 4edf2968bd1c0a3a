"""Names of a run's children, derived from the run (and the attempt, for the driver Job), so a
retried reconcile — or a restarted operator — finds what it already made instead of making it
again. Suffixes stay within ``MAX_CHILD_SUFFIX_LENGTH`` (see ``constants.NAME_BUDGET``)."""

from __future__ import annotations

from dataclasses import dataclass

from grpo_operator.api.constants import MAX_CHILD_SUFFIX_LENGTH
from grpo_operator.api.ray_job import submission_id


@dataclass(frozen=True)
class ChildNames:
    run: str

    @property
    def ray_cluster(self) -> str:
        return self.run

    @property
    def head_service(self) -> str:
        """KubeRay's name for the head Service of the RayCluster."""
        return f"{self.run}-head-svc"

    @property
    def service_account(self) -> str:
        return f"{self.run}-trainer"

    @property
    def role(self) -> str:
        return f"{self.run}-trainer"

    @property
    def role_binding(self) -> str:
        return f"{self.run}-trainer"

    @property
    def report_config_map(self) -> str:
        return f"{self.run}-report"

    @property
    def run_config_map(self) -> str:
        return f"{self.run}-run-config"

    @property
    def auth_secret(self) -> str:
        return f"{self.run}-ray-auth"

    @property
    def report_key_secret(self) -> str:
        return f"{self.run}-report-key"

    @property
    def network_policy(self) -> str:
        return f"{self.run}-ray-ingress"

    def driver_job(self, attempt: int) -> str:
        """Named like the attempt's Ray submission id, so one name follows an attempt."""
        return submission_id(self.run, attempt)


assert all(
    len(s) <= MAX_CHILD_SUFFIX_LENGTH
    for s in ("-trainer", "-report", "-run-config", "-ray-auth", "-report-key", "-head-svc",
              "-ray-ingress")
)
