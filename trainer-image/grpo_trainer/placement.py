"""Where the learner ranks and the vLLM engines run: one Ray placement group per run, each of
its bundles pinned to a worker pod.

``plan_placement`` is a pure function of the spec: the bundles, which worker pod (0..W-1) each
bundle belongs to, and which bundle each actor takes. ``create_placement_group`` maps the pods
onto the RayCluster's worker nodes and reserves the group with a ``ray.io/node-id`` label
selector per bundle, so that where an actor runs is decided by the spec, never by Ray's
packing. The head is never a candidate (it has ``num-cpus: 0`` anyway): on a RayCluster, actors
run on worker pods only. A Ray cluster of a single node (a laptop's ``ray.init``) holds every
pod's bundles on that node.

GPUs (``resources.workers x resources.gpusPerWorker`` GPUs in all, written but NOT run here —
this machine has no GPU); one bundle ``{GPU: 1, CPU: 1}`` per GPU, on its pod:

- ``colocated``: learner rank ``i`` takes half of bundle ``i``'s GPU and the engines
  (``tensorParallelSize`` GPUs each, within one pod) the other half; vLLM sleeps (sleep mode,
  level 1) while the learners update and wakes for the weight sync. Each pod holds its ranks and
  its engines.
- ``split``: with two pods or more, the first ``W // 2`` pods hold the engines and the others the
  learner ranks (one per GPU); with one pod, its first ``E x tensorParallelSize`` GPUs,
  ``E = (GPUs // 2) // tensorParallelSize``, hold the engines and the rest the ranks.

An engine with ``tensorParallelSize`` 1 runs in its actor's process (the actor holds the GPU
share); a larger one uses vLLM's Ray executor inside the same placement group, its workers on the
bundles listed in ``VLLM_RAY_BUNDLE_INDICES``.

CPUs (``gpusPerWorker: 0``): one engine and ``cpu_learner_ranks`` gloo learner ranks, each in a
bundle of ``cpu_per_actor`` CPUs (fractional, so that a 1-CPU pod holds an engine and a rank):

- ``colocated``: the engine on pod 0; ranks (default one per pod) round-robin over the pods, so
  rank 0 shares pod 0 with the engine;
- ``split``: with two pods or more, the engine alone on pod 0 and the ranks (default one per
  other pod) round-robin over pods 1..W-1; with one pod, both share it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

CPU_ACTOR_SHARE = 0.5
"""CPUs of a CPU engine's or rank's bundle: a 1-CPU pod holds an engine and a rank."""

NODE_ID_LABEL = "ray.io/node-id"
HEAD_RESOURCE = "node:__internal_head__"


@dataclass(frozen=True)
class Slot:
    """What one actor asks for: a bundle of the placement group and its share of it."""

    bundle: int
    num_cpus: float
    num_gpus: float = 0.0


@dataclass(frozen=True)
class EngineSlot:
    """An engine's actor slot and the bundles of its tensor-parallel workers."""

    actor: Slot
    worker_bundles: tuple[int, ...]
    gpus_per_worker: float  # VLLM_RAY_PER_WORKER_GPUS when tensor parallel > 1


@dataclass(frozen=True)
class PlacementPlan:
    bundles: tuple[dict[str, float], ...]
    bundle_pods: tuple[int, ...]  # the worker pod (0..pods-1) of each bundle
    learners: tuple[Slot, ...]
    engines: tuple[EngineSlot, ...]
    tensor_parallel_size: int
    colocated: bool  # engines sleep while learners update
    use_gpu: bool

    @property
    def pods(self) -> int:
        """Worker pods the plan uses."""
        return max(self.bundle_pods) + 1

    def pod_of(self, slot: Slot) -> int:
        return self.bundle_pods[slot.bundle]


def plan_placement(
    placement: str,
    tensor_parallel_size: int,
    workers: int,
    gpus_per_worker: int,
    cpu_learner_ranks: int | None = None,
    cpu_per_actor: float = CPU_ACTOR_SHARE,
) -> PlacementPlan:
    """The plan for ``rollout.placement`` / ``rollout.tensorParallelSize`` on
    ``resources.workers`` pods of ``resources.gpusPerWorker`` GPUs (see the module docstring)."""
    if placement not in ("colocated", "split"):
        raise ValueError(f"unknown placement {placement!r}")
    if gpus_per_worker == 0:
        return _cpu_plan(placement, workers, cpu_learner_ranks, cpu_per_actor)
    tp = tensor_parallel_size
    if gpus_per_worker % tp:
        raise ValueError(f"tensorParallelSize {tp} must divide gpusPerWorker {gpus_per_worker}: "
                         "an engine's GPUs must be on one pod")
    total = workers * gpus_per_worker
    bundles = ({"GPU": 1.0, "CPU": 1.0},) * total
    bundle_pods = tuple(b // gpus_per_worker for b in range(total))
    if placement == "colocated":
        learners = tuple(Slot(i, 0.5, 0.5) for i in range(total))
        engines = tuple(_engine(range(e * tp, (e + 1) * tp), 0.5) for e in range(total // tp))
        return PlacementPlan(bundles, bundle_pods, learners, engines, tp, True, True)
    engine_gpus = (workers // 2) * gpus_per_worker if workers > 1 else (total // 2) // tp * tp
    if engine_gpus < tp or total - engine_gpus < 1:
        raise ValueError(
            f"split placement needs at least {tp + 1} GPUs for tensorParallelSize {tp}, "
            f"has {total}"
        )
    engines = tuple(_engine(range(e * tp, (e + 1) * tp), 1.0) for e in range(engine_gpus // tp))
    learners = tuple(Slot(i, 0.5, 1.0) for i in range(engine_gpus, total))
    return PlacementPlan(bundles, bundle_pods, learners, engines, tp, False, True)


def _cpu_plan(placement: str, workers: int, ranks: int | None, share: float) -> PlacementPlan:
    learner_pods = list(range(1, workers)) if placement == "split" and workers > 1 else list(
        range(workers))
    ranks = ranks or len(learner_pods)
    bundle_pods = (0, *(learner_pods[r % len(learner_pods)] for r in range(ranks)))
    bundles = ({"CPU": share},) * len(bundle_pods)
    engine = EngineSlot(Slot(0, share), (0,), 0.0)
    learners = tuple(Slot(1 + r, share) for r in range(ranks))
    return PlacementPlan(bundles, bundle_pods, learners, (engine,), 1, False, False)


def _engine(bundles: range, gpu_share: float) -> EngineSlot:
    if len(bundles) == 1:  # in-process engine: the actor itself holds the GPU share
        return EngineSlot(Slot(bundles[0], 0.5, gpu_share), tuple(bundles), gpu_share)
    return EngineSlot(Slot(bundles[0], 0.5, 0.0), tuple(bundles), gpu_share)


def worker_nodes(pods: int, timeout_s: float) -> list[str]:
    """Node ids for the plan's pods: the alive worker nodes (not the head), sorted by address,
    waiting (bounded) until there are ``pods`` of them. A single-node cluster (``ray.init``
    on one machine) gets its one node."""
    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        alive = [n for n in ray.nodes() if n["Alive"]]
        workers = sorted((n for n in alive if HEAD_RESOURCE not in n["Resources"]),
                         key=lambda n: (n["NodeManagerAddress"], n["NodeID"]))
        if len(alive) == 1 and not workers:
            return [alive[0]["NodeID"]] * pods
        if len(workers) >= pods:
            return [n["NodeID"] for n in workers[:pods]]
        if time.monotonic() > deadline:
            raise TimeoutError(f"the plan needs {pods} worker nodes; the cluster has "
                               f"{len(workers)} after {timeout_s:.0f} s")
        time.sleep(1.0)


def create_placement_group(plan: PlacementPlan, timeout_s: float = 300.0):
    """Reserve the plan's bundles, each on its pod's node; raises TimeoutError when the
    cluster cannot hold them."""
    import ray
    from ray.util.placement_group import placement_group

    nodes = worker_nodes(plan.pods, timeout_s)
    selectors = [{NODE_ID_LABEL: nodes[pod]} for pod in plan.bundle_pods]
    group = placement_group(list(plan.bundles), strategy="PACK",
                            bundle_label_selector=selectors)
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        ray.util.remove_placement_group(group)
        raise TimeoutError(f"placement group {plan.bundles} not ready after {timeout_s} s")
    return group


def describe(plan: PlacementPlan, group) -> dict[str, Any]:
    """Where each actor's bundle was reserved (node id and address, from Ray's placement group
    table): the trainer logs it so that a run's layout can be read from its log."""
    import ray
    from ray.util import placement_group_table

    nodes = placement_group_table(group)["bundles_to_node_id"]
    address = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}

    def where(bundle: int) -> dict[str, str]:
        return {"node": nodes[bundle], "address": address.get(nodes[bundle], "?")}

    return {
        "engines": [where(e.actor.bundle) for e in plan.engines],
        "learners": [where(s.bundle) for s in plan.learners],
    }


def actor_options(group, slot: Slot) -> dict[str, Any]:
    """``.options(...)`` for an actor in ``slot`` of ``group`` (None: no placement group, only
    the slot's resource shares)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    options: dict[str, Any] = {"num_cpus": slot.num_cpus, "num_gpus": slot.num_gpus}
    if group is None:
        return options
    return {
        **options,
        "scheduling_strategy": PlacementGroupSchedulingStrategy(
            placement_group=group,
            placement_group_bundle_index=slot.bundle,
            placement_group_capture_child_tasks=True,
        ),
    }
