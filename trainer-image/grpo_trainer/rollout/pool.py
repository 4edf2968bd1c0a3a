"""The driver's handle on the rollout engines: split prompts across them, receive weights, sleep."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

from grpo_trainer.batch import Completion
from grpo_trainer.placement import EngineSlot, actor_options
from grpo_trainer.rollout.engine import EngineSettings, RolloutEngine, SamplingSettings
from grpo_trainer.rollout.weight_transport import GroupAddress

log = logging.getLogger(__name__)


class EnginePool:
    """``RolloutEngine`` actors, one per ``EngineSlot`` of the placement plan."""

    def __init__(self, settings: EngineSettings, slots: Sequence[EngineSlot], group) -> None:
        import ray

        remote = ray.remote(RolloutEngine)
        self.workers_per_engine = settings.tensor_parallel_size
        self.engines = []
        for slot in slots:
            env = dict(settings.env)
            if len(slot.worker_bundles) > 1:  # vLLM's Ray executor places the TP workers
                env["VLLM_RAY_BUNDLE_INDICES"] = ",".join(map(str, slot.worker_bundles))
                env["VLLM_RAY_PER_WORKER_GPUS"] = str(slot.gpus_per_worker)
            engine_settings = EngineSettings(**{**settings.__dict__, "env": env})
            options = actor_options(group, slot.actor)
            self.engines.append(remote.options(**options).remote(engine_settings))

    def wait_ready(self) -> None:
        """Block until every engine has started: a failed start surfaces here rather than at
        the first step. The engines start in the background from the constructor on."""
        import ray

        where = ray.get([engine.describe.remote() for engine in self.engines])
        for e, line in enumerate(where):
            log.info("rollout engine %d: %s", e, line)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        seeds: Sequence[int],
        sampling: SamplingSettings,
        counts: Sequence[int] | None = None,
    ) -> list[list[Completion]]:
        """Contiguous chunks of the prompts to each engine; groups back in prompt order.
        ``counts[i]`` completions of prompt i (default: ``sampling.group_size`` each)."""
        import ray

        k = len(self.engines)
        counts = list(counts) if counts is not None else [sampling.group_size] * len(prompts)
        bounds = [len(prompts) * i // k for i in range(k + 1)]
        futures = [
            engine.generate.remote(
                [list(p) for p in prompts[lo:hi]], list(seeds[lo:hi]), sampling, counts[lo:hi]
            )
            for engine, lo, hi in zip(self.engines, bounds, bounds[1:], strict=False)
            if hi > lo
        ]
        return [group for chunk in ray.get(futures) for group in chunk]

    @property
    def workers(self) -> int:
        """vLLM workers across the engines: each one is a member of the weight group."""
        return len(self.engines) * self.workers_per_engine

    def join_weight_group(self, address: GroupAddress, specs: list) -> list:
        """Every engine's join (Ray refs, not awaited: learner rank 0 must join meanwhile)."""
        return [
            engine.join_weight_group.remote(address, 1 + e * self.workers_per_engine, specs)
            for e, engine in enumerate(self.engines)
        ]

    def receive_weights(self) -> list:
        """Every engine's receive of one sync (Ray refs of the parameters each did not get)."""
        return [engine.receive_weights.remote() for engine in self.engines]

    def sleep(self) -> None:
        import ray

        ray.get([engine.sleep.remote() for engine in self.engines])

    def wake_up(self) -> None:
        import ray

        ray.get([engine.wake_up.remote() for engine in self.engines])

    def shutdown(self) -> None:
        close_actors(self.engines)


CLOSE_TIMEOUT_S = 60.0
"""How long engines get to close before they are killed: an engine stuck in a collective (a
weight group whose other side died) never reaches its close."""


def close_actors(actors: Sequence, timeout: float = CLOSE_TIMEOUT_S) -> None:
    """``close()`` every actor, waiting at most ``timeout`` seconds for them all, then kill
    them: shutting down must end even when an actor is stuck in an earlier call."""
    import ray

    closing = [actor.close.remote() for actor in actors]
    # An engine whose start failed has nothing to close; a stuck one is killed regardless.
    with contextlib.suppress(ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
        ray.get(closing, timeout=timeout)
    for actor in actors:
        ray.kill(actor)
