"""One operator instance acts at a time: the holder of a ``coordination.k8s.io`` Lease.

The rules are client-go's leader election: a candidate takes the Lease when it has no holder,
or when its record has not changed for ``lease_seconds`` as this process measures time (its own
monotonic clock, so clocks that disagree between nodes do not matter); the holder renews it
every ``retry_seconds``; a holder that has not renewed for ``renew_deadline_seconds`` (shorter
than the lease) stops acting before anyone else may take over. Every write carries the
resourceVersion it read, so two candidates can never both win. A clean stop gives the Lease up
at once, so a rolling update hands over without waiting for it to expire.

kopf's own peering is not used: it needs kopf's peering CRDs, and two instances of the same
priority — replicas of one Deployment — both freeze, leaving the runs unserved.
"""

from __future__ import annotations

import datetime
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.rest import ApiException

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseSettings:
    namespace: str
    name: str
    identity: str
    lease_seconds: float = 15.0

    # client-go's defaults (15 s, 10 s, 2 s), in proportion to the lease.
    @property
    def renew_deadline_seconds(self) -> float:
        return self.lease_seconds * 2 / 3

    @property
    def retry_seconds(self) -> float:
        return self.lease_seconds * 2 / 15

    @property
    def request_timeout(self) -> tuple[float, float]:
        """(connect, read) of each Lease request: a hung request must not outlast the renew
        deadline, or a holder would act on after another took over."""
        return (self.retry_seconds, self.renew_deadline_seconds / 2)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class LeaderElection:
    """Runs ``on_started`` (in its own thread) once this instance holds the Lease, and
    ``on_lost`` if it then fails to keep it; ``stop()`` gives it up."""

    def __init__(self, api: client.ApiClient, settings: LeaseSettings, *,
                 on_started: Callable[[], None], on_lost: Callable[[], None]):
        self.api = client.CoordinationV1Api(api)
        self.settings = settings
        self.on_started, self.on_lost = on_started, on_lost
        self.leading = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        # The other holder's record as last seen, and when (monotonic) it last changed.
        self._seen: tuple[str | None, str | None] | None = None
        self._seen_at = 0.0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.settings.retry_seconds + self.settings.renew_deadline_seconds)
        if self.leading.is_set():
            self._release()

    # -- the loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        s = self.settings
        while not self._stop.is_set() and not self._try():
            self._stop.wait(s.retry_seconds * (1 + 0.2 * random.random()))  # noqa: S311
        if self._stop.is_set():
            return
        self.leading.set()
        log.info("%s leads (Lease %s/%s)", s.identity, s.namespace, s.name)
        self.on_started()
        renewed = time.monotonic()
        while not self._stop.wait(s.retry_seconds):
            if self._try():
                renewed = time.monotonic()
            elif time.monotonic() - renewed > s.renew_deadline_seconds:
                self.leading.clear()
                log.error("%s lost the Lease %s/%s (not renewed for %.0f s): stopping",
                          s.identity, s.namespace, s.name, s.renew_deadline_seconds)
                self.on_lost()
                return

    def _try(self) -> bool:
        """Take or renew the Lease; False when another holds it or a write lost a race."""
        s = self.settings
        try:
            lease = self.api.read_namespaced_lease(s.name, s.namespace,
                                                   _request_timeout=s.request_timeout)
        except ApiException as e:
            if e.status != 404:
                log.warning("reading Lease %s/%s: %s", s.namespace, s.name, e.reason)
                return False
            return self._create()
        except Exception as e:  # noqa: BLE001 - an unreachable API server is one failed try
            log.warning("reading Lease %s/%s: %s", s.namespace, s.name, e)
            return False
        spec = lease.spec or client.V1LeaseSpec()
        holder = spec.holder_identity or None
        if holder not in (None, s.identity):
            record = (holder, str(spec.renew_time))
            if record != self._seen:
                self._seen, self._seen_at = record, time.monotonic()
            if time.monotonic() - self._seen_at < (spec.lease_duration_seconds
                                                    or s.lease_seconds):
                return False
        now = _now()
        taking = holder != s.identity
        lease.spec = client.V1LeaseSpec(
            holder_identity=s.identity,
            lease_duration_seconds=int(s.lease_seconds),
            acquire_time=now if taking else spec.acquire_time,
            renew_time=now,
            lease_transitions=(spec.lease_transitions or 0) + (1 if taking and holder else 0),
        )
        try:  # a replace carries the read resourceVersion: a racing write fails with 409
            self.api.replace_namespaced_lease(s.name, s.namespace, lease,
                                              _request_timeout=s.request_timeout)
        except Exception as e:  # noqa: BLE001
            log.info("%s did not %s Lease %s/%s: %s", s.identity,
                     "take" if taking else "renew", s.namespace, s.name,
                     getattr(e, "reason", e))
            return False
        if taking and holder:
            log.info("%s took over Lease %s/%s from %s", s.identity, s.namespace, s.name, holder)
        return True

    def _create(self) -> bool:
        s, now = self.settings, _now()
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=s.name, namespace=s.namespace),
            spec=client.V1LeaseSpec(holder_identity=s.identity,
                                    lease_duration_seconds=int(s.lease_seconds),
                                    acquire_time=now, renew_time=now, lease_transitions=0),
        )
        try:
            self.api.create_namespaced_lease(s.namespace, body, _request_timeout=s.request_timeout)
        except Exception as e:  # noqa: BLE001 - 409: another candidate made it first
            log.info("%s did not create Lease %s/%s: %s", s.identity, s.namespace, s.name,
                     getattr(e, "reason", e))
            return False
        return True

    def _release(self) -> None:
        """Give the Lease up (holder cleared), if still ours."""
        s = self.settings
        try:
            lease = self.api.read_namespaced_lease(s.name, s.namespace,
                                                   _request_timeout=s.request_timeout)
            if lease.spec is None or lease.spec.holder_identity != s.identity:
                return
            lease.spec.holder_identity = None
            lease.spec.lease_duration_seconds = 1
            self.api.replace_namespaced_lease(s.name, s.namespace, lease,
                                              _request_timeout=s.request_timeout)
            self.leading.clear()
            log.info("%s gave up Lease %s/%s", s.identity, s.namespace, s.name)
        except Exception as e:  # noqa: BLE001 - it expires by itself
            log.warning("%s could not give up Lease %s/%s: %s", s.identity, s.namespace,
                        s.name, e)
