"""The kopf app: thin handlers that feed the controller's work queue.

kopf's persistence is pinned (its defaults changed across releases). No handler here needs a
finalizer — kopf adds one only for creation/update/deletion handlers, daemons and timers — so
deleting a GRPORun never waits for the operator.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

import kopf
from kubernetes import client, config

from grpo_operator import settings as operator_settings
from grpo_operator.api.constants import (
    CRD_NAME,
    FINALIZER,
    GROUP,
    KOPF_ANNOTATIONS_PREFIX,
    LABEL_RUN,
    PLURAL,
    VERSION,
)
from grpo_operator.cache import CHILD_KINDS, CachedKind, ObjectCache
from grpo_operator.controller import Controller
from grpo_operator.kube import CREATE_THREADS, Kube
from grpo_operator.leader import LeaderElection
from grpo_operator.metrics import Metrics
from grpo_operator.signing import load_or_create_signing_key

UNSERVED_RETRY_SECONDS = 10
KOPF_IDLE_SECONDS = 0.5


class _NoDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf's diff base, pinned to our annotation but never built: no handler here reacts to
    changes (kopf's create/update/resume handlers), and building it deep-copies the body of
    every event of every watched kind (a fifth of kopf's time with 200 runs)."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=KOPF_ANNOTATIONS_PREFIX
    )
    settings.persistence.diffbase_storage = _NoDiffBase(
        prefix=KOPF_ANNOTATIONS_PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = FINALIZER
    # The controller writes its own Events; kopf's would repeat handler logs as Events.
    settings.posting.enabled = False
    # The CRD watch (this module's and kopf's own resource observer share it) would list and
    # decode every CRD in the cluster at start and on each change: KubeRay's four alone are
    # 1.3 MB of JSON, 20 MiB of this process measured. kopf then notices only this CRD's
    # changes, so the kinds of the children must be served when it starts (checked below).
    settings.watching.field_selectors["apiextensions.k8s.io", "v1",
                                      "customresourcedefinitions"] = f"metadata.name={CRD_NAME}"
    settings.watching.server_timeout = 300
    # kopf keeps a task per object for this long after its last event, holding that event's
    # whole decoded body (its default, 5 s, kept ~500 bodies alive, 13 MiB, with 300 runs'
    # clusters coming up); a task made again per burst of events costs less.
    settings.queueing.idle_timeout = KOPF_IDLE_SECONDS
    # A half-open connection must fail, not hang: a watch the server should have ended by now,
    # a request or a handshake that takes longer than any answer could.
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 10
    # The API server sends only the runs' children, not every Pod, ConfigMap or Secret.
    for kind in CHILD_KINDS:
        settings.watching.label_selectors[kind.group, kind.version, kind.plural] = LABEL_RUN
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    own = operator_settings.from_env()
    configuration = client.Configuration.get_default_copy()
    # Every reconcile worker and create thread may hold a connection at once (urllib3 would
    # otherwise open and discard extra ones, with a warning each).
    configuration.connection_pool_maxsize = own.workers + CREATE_THREADS + 2
    api = client.ApiClient(configuration)
    kube = Kube(api, ObjectCache())
    # kopf watches what is served once this handler returns; a kind installed later would go
    # unwatched (above), so the operator waits for it here, saying what is missing.
    missing = kube.unserved(CHILD_KINDS)
    if missing:
        raise kopf.TemporaryError(
            f"the API server does not serve {', '.join(missing)}: install KubeRay "
            f"(its CRDs) first; checking again in {UNSERVED_RETRY_SECONDS} s",
            delay=UNSERVED_RETRY_SECONDS)
    metrics = Metrics()
    if own.metrics_port:
        metrics.serve(own.metrics_port)
    signing_key = load_or_create_signing_key(kube.resource("v1", "Secret"), own.namespace,
                                             own.signing_secret)
    controller = memo.controller = Controller(kube, workers=own.workers,
                                              policy=own.policy, metrics=metrics,
                                              sweep_seconds=own.sweep_seconds,
                                              namespaces=own.namespaces,
                                              signing_key=signing_key)
    logging.getLogger("grpo_operator").setLevel(logging.INFO)
    # A line per watch event handled ("Handler 'wake-pods' succeeded") says nothing; failures
    # are still logged.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    memo.election = None
    if own.leader_election is None:
        controller.start()
        return
    # Every instance watches and queues; only the Lease's holder reconciles. One that loses the
    # Lease stops taking work and exits, as client-go's controllers do: its Deployment starts it
    # again as a candidate. (A pass still running then writes nothing over a newer status.)
    def lost() -> None:
        controller.queue.close()
        os.kill(os.getpid(), signal.SIGTERM)

    memo.election = LeaderElection(api, own.leader_election, on_started=controller.start,
                                   on_lost=lost)
    memo.election.start()


@kopf.on.cleanup()
def cleanup(memo: kopf.Memo, **_: Any) -> None:
    memo.controller.stop()
    if memo.election is not None:
        memo.election.stop()


# The watch handlers are coroutines: they only touch the cache and the queue (microseconds
# under their locks), and kopf would otherwise hop to a thread pool for each event.
@kopf.on.event(GROUP, VERSION, PLURAL)
async def on_event(event: dict[str, Any], memo: kopf.Memo, **_: Any) -> None:
    memo.controller.run_event(event["type"], event["object"])


@kopf.on.event("apiextensions.k8s.io", "v1", "customresourcedefinitions", id="crd",
               field="metadata.name", value=CRD_NAME)
async def on_crd_event(event: dict[str, Any], memo: kopf.Memo, **_: Any) -> None:
    """A new generation of the GRPORun CRD (its schema changed; the first listing only says
    which generation is served)."""
    generation = event["object"]["metadata"].get("generation")
    seen, memo.crd_generation = memo.get("crd_generation"), generation
    if event["type"] == "MODIFIED" and seen is not None and generation != seen:
        memo.controller.crd_changed()


def _watch_children(kind: CachedKind) -> None:
    """The cache of ``kind`` is filled by a kopf index (kopf starts no handler before every
    index has its first listing, so no pass reads a half-filled cache) and its events wake
    their run; deletions come as events (an index only forgets)."""
    resource = (kind.group, kind.version, kind.plural)

    @kopf.index(*resource, id=f"cache-{kind.plural}", labels={LABEL_RUN: kopf.PRESENT})
    async def cache(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        memo.controller.kube.cache.put(kind.kind, body)

    @kopf.on.event(*resource, id=f"wake-{kind.plural}", labels={LABEL_RUN: kopf.PRESENT})
    async def wake(event: dict[str, Any], memo: kopf.Memo, **_: Any) -> None:
        memo.controller.child_event(kind.kind, event["type"], event["object"])


for _kind in CHILD_KINDS:
    _watch_children(_kind)


@kopf.on.probe(id="queuedRuns")
def queued_runs(memo: kopf.Memo, **_: Any) -> int:
    return len(memo.controller.queue)
