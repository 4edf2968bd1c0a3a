"""The driver's handle on the learner ranks: start them, shard each step, send weights, save."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from grpo_trainer.batch import Batch, shard_batch, to_wire
from grpo_trainer.learner.actor import LearnerRank, LearnerSettings
from grpo_trainer.learner.update import UpdatePlan
from grpo_trainer.placement import Slot, actor_options
from grpo_trainer.rollout.weight_transport import GroupAddress


class LearnerGroup:
    """``world_size`` ``LearnerRank`` actors running one torch.distributed group."""

    def __init__(self, settings: LearnerSettings, slots: tuple[Slot, ...], group) -> None:
        import ray

        remote = ray.remote(LearnerRank)
        self.world_size = len(slots)
        self.ranks = [
            remote.options(**actor_options(group, slot)).remote(r, self.world_size, settings)
            for r, slot in enumerate(slots)
        ]
        addr, port = ray.get(self.ranks[0].serve_rendezvous.remote())
        ray.get([rank.setup.remote(addr, port) for rank in self.ranks])

    def update(self, batch: Batch, plan: UpdatePlan, mini_batch_size: int) -> dict[str, float]:
        """Train on the step's ``batch`` (global ``mini_batch_size`` sequences per optimizer
        step); ``plan.mini_batch_per_rank`` must be ``mini_batch_size / world_size``."""
        import ray

        shards = shard_batch(batch, self.world_size, mini_batch_size)
        results = ray.get(
            [rank.update.remote(to_wire(s), plan)
             for rank, s in zip(self.ranks, shards, strict=True)]
        )
        return results[0]  # all-reduced: every rank returns the same figures

    def logprobs(self, batch: Batch, reference: bool = False) -> Tensor:
        """(N, Tr) logprobs of ``batch``'s responses (rank 0's replica)."""
        import ray

        return ray.get(self.ranks[0].logprobs.remote(to_wire(batch), reference))

    def states(self) -> list[dict[str, Tensor]]:
        """Every rank's parameters (tests)."""
        import ray

        return ray.get([rank.state.remote() for rank in self.ranks])

    def open_weight_group(self, world_size: int) -> tuple[GroupAddress, list]:
        """Rank 0's address for a weight group of ``world_size`` members, and the specs of
        what each sync sends (``rollout.weight_sync.TensorSpec.to_wire`` items)."""
        import ray

        return ray.get(self.ranks[0].weight_group_address.remote(world_size))

    def join_weight_group(self, address: GroupAddress):
        """Rank 0's join (a Ray ref, not awaited: the engines must join meanwhile)."""
        return self.ranks[0].join_weight_group.remote(address)

    def send_weights(self) -> list:
        """Every rank's part of one sync (Ray refs, not awaited: the engines receive meanwhile)."""
        return [rank.send_weights.remote() for rank in self.ranks]

    def save_model(self, out_dir: str) -> str:
        import ray

        return ray.get([rank.save_model.remote(out_dir) for rank in self.ranks])[0]

    def begin_save_state(self, checkpoint_dir: str) -> Callable[[], None]:
        """Start writing the policy (``model/``, HF) and every rank's optimizer and RNG into a
        checkpoint directory (the ranks and the driver share the checkpoint volume); returns
        the wait for the writes. A rank runs its calls in order, so a later ``update`` starts
        only once the rank has written this state."""
        import ray

        written = [rank.save_state.remote(checkpoint_dir) for rank in self.ranks]
        return lambda: ray.get(written)

    def load_state(self, checkpoint_dir: str) -> None:
        """Restore what ``begin_save_state`` wrote."""
        import ray

        ray.get([rank.load_state.remote(checkpoint_dir) for rank in self.ranks])

    def shutdown(self) -> None:
        import ray

        ray.get([rank.shutdown.remote() for rank in self.ranks])
        for rank in self.ranks:
            ray.kill(rank)

