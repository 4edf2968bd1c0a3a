"""Two operator replicas as the chart runs them (leader election on, the chart's identity): one
leads, the other stands by. The leader SIGKILLed mid-provisioning is replaced once its Lease runs
out; the killed one comes back (as a restarted container, under the same name) as the stand-by;
the new leader SIGKILLed while the trainer runs is replaced in turn. Nothing is lost or made
twice: the run completes in its first attempt, one RayCluster and one driver Job throughout."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from tests.operator.conftest import (
    OPERATOR_SETTINGS,
    OperatorProcess,
    host_path_settings,
    running_session_operator,
)
from tests.operator.lifecycle.runs import tiny_example
from tests.waiting import Watching, wait_for

pytestmark = pytest.mark.cluster

LEASE_SECONDS = 6


class ChildCount(Watching):
    """The most RayClusters and driver Jobs of the run seen at once, looked at all along."""

    def __init__(self, runs, name: str):
        super().__init__()
        self.runs, self.name = runs, name
        self.most = {"RayCluster": 0, "Job": 0}

    def look(self) -> None:
        children = self.runs.children(self.name)
        for kind in self.most:
            self.most[kind] = max(self.most[kind], len(children.get(kind, [])))


def test_killed_leaders_are_replaced_within_their_lease_and_the_run_loses_nothing(
        cluster, chart_identity, runs, tmp_path, tmp_path_factory, request):
    env = {**chart_identity.operator_env, **OPERATOR_SETTINGS, "GRPO_METRICS_PORT": "0",
           "GRPO_LEASE_SECONDS": str(LEASE_SECONDS), **host_path_settings(tmp_path_factory)}
    assert env["GRPO_LEADER_ELECTION"] == "true"  # as the chart installs it
    leases = client.CoordinationV1Api(runs.api)

    def holder() -> str | None:
        try:
            return leases.read_namespaced_lease(env["GRPO_LEASE_NAME"], chart_identity.namespace
                                                ).spec.holder_identity
        except client.ApiException:
            return None

    session = running_session_operator(request)
    with session.paused():
        replicas = {}
        for name in ("replica-a", "replica-b"):
            replicas[name] = OperatorProcess(cluster, tmp_path / f"{name}.log",
                                             kubeconfig=chart_identity.kubeconfig, env=env)
        try:
            for replica in replicas.values():
                replica.start()
            identities = {r.identity: r for r in replicas.values()}
            wait_for(lambda: holder() in identities, 30, what="a leader")
            body = tiny_example(tmp_path)
            name = body["metadata"]["name"]
            handovers = []

            def kill_leader() -> OperatorProcess:
                """SIGKILL the leader, as a node loss would; returns the stand-by once it
                holds the Lease."""
                leader = identities[holder()]
                leader.kill()
                killed = time.monotonic()
                standby = next(r for r in replicas.values() if r is not leader)
                wait_for(lambda: holder() == standby.identity, 4 * LEASE_SECONDS,
                         interval=0.2, what="the stand-by taking over")
                handovers.append(time.monotonic() - killed)
                assert f"{standby.identity} took over Lease" in standby.log_path.read_text()
                leader.start()  # its container restarted: the stand-by now
                return standby

            with ChildCount(runs, name) as count:
                runs.create(body)
                wait_for(lambda: runs.ray_cluster(name), 60, what="the RayCluster")
                kill_leader()  # mid-provisioning
                wait_for(lambda: runs.ledger(name).get("completedSteps", 0) >= 1, 400,
                         what="the first step in status")
                kill_leader()  # while the trainer runs
                wait_for(lambda: runs.phase(name) in ("Succeeded", "Failed"), 600,
                         what="the end")
            status = runs.status(name)
            assert status["phase"] == "Succeeded", status
            assert (status["recovery"]["attempt"], status["recovery"]["restarts"]) == (1, 0)
            assert [h["attempt"] for h in status["recovery"]["history"]] == [1]
            assert count.most == {"RayCluster": 1, "Job": 1}, count.most
            assert runs.children(name).get("Job") == [f"{name}-a1"]
            assert len([e for e in runs.events(name) if e[1] == "Running"]) == 1
            # Not before the Lease ran out (it was renewed just before the kill), not much after.
            for took in handovers:
                assert LEASE_SECONDS * 0.5 <= took <= LEASE_SECONDS + 5, handovers
            print(f"the stand-by took over {handovers} s after the leader was killed")
        finally:
            for replica in replicas.values():
                replica.stop()
        for replica in replicas.values():
            assert replica.refusals() == [], replica.log_path
