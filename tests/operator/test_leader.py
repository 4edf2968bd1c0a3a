"""Leader election on a real Lease of the real API server: one candidate leads, the other waits;
a holder that dies (stops renewing without giving the Lease up) is replaced once the Lease has
gone unrenewed for its duration, not before; a holder that stops cleanly hands over at once; a
holder whose Lease is taken from it stops acting."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from kubernetes import client

from grpo_operator.leader import LeaderElection, LeaseSettings
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster

LEASE_SECONDS = 3.0


class Candidate:
    def __init__(self, api, lease: str, namespace: str, identity: str):
        self.started = threading.Event()
        self.lost = threading.Event()
        self.election = LeaderElection(
            api, LeaseSettings(namespace=namespace, name=lease, identity=identity,
                               lease_seconds=LEASE_SECONDS),
            on_started=self.started.set, on_lost=self.lost.set)
        self.election.start()

    def die(self) -> None:
        """SIGKILL as seen from the Lease: no more renewals, nothing given up."""
        self.election._stop.set()
        self.election._thread.join(5)


@pytest.fixture
def lease(k8s_api, namespace):
    name = f"leader-{uuid.uuid4().hex[:6]}"
    yield name, namespace, client.CoordinationV1Api(k8s_api)


def holder(lease) -> str | None:
    name, namespace, api = lease
    return api.read_namespaced_lease(name, namespace).spec.holder_identity


def test_one_leads_and_a_dead_leader_is_replaced_after_the_lease_not_before(k8s_api, lease):
    name, namespace, _ = lease
    a = Candidate(k8s_api, name, namespace, "a")
    wait_for(a.started.is_set, 10, what="a leading")
    b = Candidate(k8s_api, name, namespace, "b")
    time.sleep(2 * LEASE_SECONDS)  # b sees a renewing: it waits
    assert not b.started.is_set() and holder(lease) == "a"

    a.die()
    died = time.monotonic()
    wait_for(b.started.is_set, 4 * LEASE_SECONDS, interval=0.05, what="b taking over")
    waited = time.monotonic() - died
    assert LEASE_SECONDS - 0.5 <= waited <= LEASE_SECONDS + 2, waited
    assert holder(lease) == "b"
    b.election.stop()


def test_a_clean_stop_hands_over_at_once(k8s_api, lease):
    name, namespace, _ = lease
    a = Candidate(k8s_api, name, namespace, "a")
    wait_for(a.started.is_set, 10, what="a leading")
    b = Candidate(k8s_api, name, namespace, "b")
    time.sleep(1)
    stopped = time.monotonic()
    a.election.stop()
    wait_for(b.started.is_set, 3, interval=0.05, what="b taking over")
    assert time.monotonic() - stopped < LEASE_SECONDS  # no waiting out the Lease
    assert not a.lost.is_set()
    b.election.stop()


def test_a_leader_whose_lease_is_taken_stops_acting(k8s_api, lease):
    name, namespace, api = lease
    a = Candidate(k8s_api, name, namespace, "a")
    wait_for(a.started.is_set, 10, what="a leading")
    # Another writer takes the Lease over (its renewals would then keep failing for a).
    stored = api.read_namespaced_lease(name, namespace)
    stored.spec.holder_identity = "intruder"
    stored.spec.lease_duration_seconds = 60
    api.replace_namespaced_lease(name, namespace, stored)
    wait_for(a.lost.is_set, 10, what="a giving up")
    assert not a.election.leading.is_set()
    assert holder(lease) == "intruder"
