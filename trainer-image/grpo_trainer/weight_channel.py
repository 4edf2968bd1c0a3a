"""The driver's side of the weight sync: learner rank 0 to every engine worker, across nodes.

``WeightChannel`` builds the weight group once (``rollout.weight_transport``) and runs each sync
(``rollout.weight_sync``). Both are collectives: the driver issues the learners' and the engines'
Ray calls together and only then waits, since each side blocks until the other is there.
"""

from __future__ import annotations

from grpo_trainer.learner.group import LearnerGroup
from grpo_trainer.rollout.pool import EnginePool
from grpo_trainer.sync_errors import WeightSyncIncompleteError


class WeightChannel:
    """The weight group between ``learners`` and ``engines``. Building another channel to the
    same engines replaces this one (an engine is in one group at a time)."""

    def __init__(self, learners: LearnerGroup, engines: EnginePool) -> None:
        self.learners, self.engines = learners, engines
        address, specs = learners.open_weight_group(1 + engines.workers)
        _get_all([learners.join_weight_group(address), *engines.join_weight_group(address, specs)])

    def sync(self) -> None:
        """Put the learners' weights into every engine. Raises ``WeightSyncIncompleteError``
        when an engine expected parameters that the sync did not carry."""
        sends = self.learners.send_weights()
        receives = self.engines.receive_weights()
        results = _get_all([*sends, *receives])
        missing = sorted({name for per_engine in results[len(sends):] for name in per_engine})
        if missing:
            raise WeightSyncIncompleteError(missing)


def _get_all(refs: list) -> list:
    """``ray.get(refs)``, but raising a failure as soon as it is known: the failed call's peers
    stay blocked in the collective until the group's timeout, and waiting for them would only
    delay the error by that long."""
    import ray

    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        ray.get(ready)
    return ray.get(refs)
