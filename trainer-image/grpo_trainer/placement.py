"""Where the learner ranks and the vLLM engines run: one Ray placement group per run.

``plan_placement`` is a pure function of the spec; ``create_placement_group`` reserves it.

GPUs (``resources.workers x resources.gpusPerWorker`` GPUs in all, written but NOT run here —
this machine has no GPU):

- ``colocated``: one bundle ``{GPU: 1, CPU: 1}`` per GPU; learner rank ``i`` takes half of
  bundle ``i``'s GPU and the engines (``tensorParallelSize`` GPUs each) the other half; vLLM
  sleeps (sleep mode, level 1) while the learners update and wakes for the weight sync.
- ``split``: the first ``E x tensorParallelSize`` GPUs, ``E = (GPUs // 2) // tensorParallelSize``,
  hold the engines; the remaining GPUs hold one learner rank each.

An engine with ``tensorParallelSize`` 1 runs in its actor's process (the actor holds the GPU
share); a larger one uses vLLM's Ray executor inside the same placement group, its workers on the
bundles listed in ``VLLM_RAY_BUNDLE_INDICES``.

CPUs (``gpusPerWorker: 0``): one engine and ``cpu_learner_ranks`` gloo learner ranks (default
``resources.workers``), each in a bundle of ``cpu_per_actor`` CPUs (fractional, so that a
2-core laptop holds an engine and two ranks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
    learners: tuple[Slot, ...]
    engines: tuple[EngineSlot, ...]
    tensor_parallel_size: int
    colocated: bool  # engines sleep while learners update
    use_gpu: bool
    strategy: str = "PACK"


def plan_placement(
    placement: str,
    tensor_parallel_size: int,
    workers: int,
    gpus_per_worker: int,
    cpu_learner_ranks: int | None = None,
    cpu_per_actor: float = 0.5,
) -> PlacementPlan:
    """The plan for ``rollout.placement`` / ``rollout.tensorParallelSize`` on
    ``resources.workers x resources.gpusPerWorker`` GPUs (see the module docstring)."""
    tp = tensor_parallel_size
    if gpus_per_worker == 0:
        ranks = cpu_learner_ranks or workers
        bundles = ({"CPU": cpu_per_actor},) * (ranks + 1)
        engine = EngineSlot(Slot(0, cpu_per_actor), (0,), 0.0)
        learners = tuple(Slot(1 + r, cpu_per_actor) for r in range(ranks))
        return PlacementPlan(bundles, learners, (engine,), 1, False, False)

    total = workers * gpus_per_worker
    bundles = ({"GPU": 1.0, "CPU": 1.0},) * total
    if placement == "colocated":
        if total % tp:
            raise ValueError(f"tensorParallelSize {tp} must divide the {total} GPUs")
        learners = tuple(Slot(i, 0.5, 0.5) for i in range(total))
        engines = tuple(_engine(range(e * tp, (e + 1) * tp), 0.5) for e in range(total // tp))
        return PlacementPlan(bundles, learners, engines, tp, True, True)
    if placement == "split":
        num_engines = (total // 2) // tp
        if num_engines < 1 or total - num_engines * tp < 1:
            raise ValueError(
                f"split placement needs at least {tp + 1} GPUs for tensorParallelSize {tp}, "
                f"has {total}"
            )
        engines = tuple(_engine(range(e * tp, (e + 1) * tp), 1.0) for e in range(num_engines))
        learners = tuple(Slot(i, 0.5, 1.0) for i in range(num_engines * tp, total))
        return PlacementPlan(bundles, learners, engines, tp, False, True)
    raise ValueError(f"unknown placement {placement!r}")


def _engine(bundles: range, gpu_share: float) -> EngineSlot:
    if len(bundles) == 1:  # in-process engine: the actor itself holds the GPU share
        return EngineSlot(Slot(bundles[0], 0.5, gpu_share), tuple(bundles), gpu_share)
    return EngineSlot(Slot(bundles[0], 0.5, 0.0), tuple(bundles), gpu_share)


def create_placement_group(plan: PlacementPlan, timeout_s: float = 300.0):
    """Reserve the plan's bundles; raises TimeoutError when the cluster cannot hold them."""
    import ray
    from ray.util.placement_group import placement_group

    group = placement_group(list(plan.bundles), strategy=plan.strategy)
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        ray.util.remove_placement_group(group)
        raise TimeoutError(f"placement group {plan.bundles} not ready after {timeout_s} s")
    return group


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
