"""The GRPO step loop: sample -> generate -> reward -> advantages -> update -> sync -> metrics.

``Trainer`` owns no Ray actors of its own making: it is handed an ``EnginePool``, a
``LearnerGroup``, the prompts and a reward function, so tests and the CLI wire it the same way
(``grpo_trainer.run``). After every step it calls its ``after_step`` hooks with the step's
``StepMetrics``: that is where a reporter (Kubernetes status) and checkpointing plug in, using
``state_dict()`` for the driver-side state (step, sampler).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_trainer.algorithm_settings import AlgorithmSettings
from grpo_trainer.batch import build_batch
from grpo_trainer.data import PromptDataset
from grpo_trainer.learner.group import LearnerGroup
from grpo_trainer.learner.update import UpdatePlan
from grpo_trainer.rollout.engine import SamplingSettings
from grpo_trainer.rollout.pool import EnginePool
from grpo_trainer.sampler import PromptSampler
from grpo_trainer.step_metrics import StepMetrics

log = logging.getLogger(__name__)

RewardFn = Callable[[str, str], float]
AfterStepHook = Callable[["Trainer", StepMetrics], None]
MAX_AUTO_MICRO_BATCH = 16


@dataclass(frozen=True)
class TrainerConfig:
    """The loop's settings, from ``spec.algorithm`` (``from_algorithm``)."""

    max_steps: int
    group_size: int
    prompts_per_step: int
    ppo_epochs: int
    mini_batch_size: int  # global sequences per optimizer step
    micro_batch_size: int | None  # per rank; None: the largest divisor <= 16 of the rank's share
    max_grad_norm: float
    max_response_tokens: int
    top_p: float
    seed: int
    algorithm: AlgorithmSettings

    @classmethod
    def from_algorithm(cls, algorithm: Any) -> TrainerConfig:
        """From the contract's ``AlgorithmSpec`` (``grpo_operator.api.training``)."""
        step_sequences = algorithm.prompts_per_step * algorithm.group_size
        return cls(
            max_steps=algorithm.max_steps,
            group_size=algorithm.group_size,
            prompts_per_step=algorithm.prompts_per_step,
            ppo_epochs=algorithm.ppo_epochs,
            mini_batch_size=algorithm.mini_batch_size or step_sequences,
            micro_batch_size=algorithm.micro_batch_size,
            max_grad_norm=algorithm.max_grad_norm,
            max_response_tokens=algorithm.max_response_tokens,
            top_p=algorithm.top_p,
            seed=algorithm.seed,
            algorithm=AlgorithmSettings.from_algorithm(
                algorithm.model_dump(by_alias=True, mode="json")
            ),
        )

    def update_plan(self, world_size: int) -> UpdatePlan:
        per_rank, rest = divmod(self.mini_batch_size, world_size)
        if rest or per_rank == 0:
            raise ValueError(
                f"miniBatchSize {self.mini_batch_size} is not a multiple of the "
                f"{world_size} learner ranks"
            )
        micro = self.micro_batch_size or max(
            d for d in range(1, min(per_rank, MAX_AUTO_MICRO_BATCH) + 1) if per_rank % d == 0
        )
        if per_rank % micro:
            raise ValueError(f"microBatchSize {micro} must divide the rank's mini-batch {per_rank}")
        return UpdatePlan(
            ppo_epochs=self.ppo_epochs,
            mini_batch_per_rank=per_rank,
            micro_batch_size=micro,
            max_grad_norm=self.max_grad_norm,
            response_width=self.max_response_tokens,
        )


class Trainer:
    """Runs GRPO steps until ``config.max_steps``."""

    def __init__(
        self,
        config: TrainerConfig,
        dataset: PromptDataset,
        reward_fn: RewardFn,
        engines: EnginePool,
        learners: LearnerGroup,
        pad_id: int,
        colocated: bool = False,
        after_step: Sequence[AfterStepHook] = (),
    ) -> None:
        self.config = config
        self.dataset = dataset
        self.reward_fn = reward_fn
        self.engines = engines
        self.learners = learners
        self.pad_id = pad_id
        self.colocated = colocated
        self.after_step = list(after_step)
        self.plan = config.update_plan(learners.world_size)
        self.sampler = PromptSampler(len(dataset), config.prompts_per_step, config.seed)
        self.sampling = SamplingSettings(
            group_size=config.group_size,
            max_tokens=config.max_response_tokens,
            temperature=config.algorithm.temperature,
            top_p=config.top_p,
        )
        self.step = 0  # optimizer steps completed (the weights' version)

    def state_dict(self) -> dict[str, Any]:
        """Driver-side state a checkpoint needs (the learners hold model and optimizer)."""
        return {"step": self.step, "sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = state["step"]
        self.sampler.load_state_dict(state["sampler"])

    def train(self) -> list[StepMetrics]:
        """Sync the engines with the learners, then step until ``max_steps``."""
        self.sync_weights()
        history = []
        while self.step < self.config.max_steps:
            metrics = self.train_step()
            log.info("%s", metrics.progress_line())
            for hook in self.after_step:
                hook(self, metrics)
            history.append(metrics)
        return history

    def sync_weights(self) -> float:
        """Put the learners' weights into every engine; returns the seconds it took."""
        start = time.perf_counter()
        path = self.learners.write_weights()
        try:
            self.engines.load_weights_file(path)
        finally:
            Path(path).unlink(missing_ok=True)
        return time.perf_counter() - start

    def _seeds(self, count: int) -> list[int]:
        """One sampling seed per prompt of this step (vLLM gives child i ``seed + i``)."""
        base = random.Random(f"{self.config.seed}/{self.step}").getrandbits(48)
        return [base + i * self.config.group_size for i in range(count)]

    def train_step(self) -> StepMetrics:
        """One GRPO step; returns its metrics (``self.step`` is then one higher)."""
        t0 = time.perf_counter()

        # 1. Sample this step's prompts (seeded, resumable).
        rows = [self.dataset.rows[i] for i in self.sampler.next_batch()]
        prompts = [list(row.prompt_ids) for row in rows]

        # 2. Generate groupSize completions per prompt (token ids in and out).
        groups = self.engines.generate(prompts, self._seeds(len(prompts)), self.sampling)
        t1 = time.perf_counter()

        # 3. Score every completion against its prompt's ground truth.
        scores = [
            float(self.reward_fn(c.text, row.ground_truth))
            for row, group in zip(rows, groups, strict=True)
            for c in group
        ]
        t2 = time.perf_counter()

        # 4. Group-relative advantages and the padded batch.
        batch = build_batch(
            prompts, groups, scores, self.pad_id, self.config.algorithm.normalize_advantage_by_std
        )

        # 5. Update the policy (colocated engines give their GPU memory back meanwhile).
        if self.colocated:
            self.engines.sleep()
        learn = self.learners.update(batch, self.plan, self.config.mini_batch_size)
        if self.colocated:
            self.engines.wake_up()
        t3 = time.perf_counter()

        # 6. Sync the new weights into the engines.
        sync_s = self.sync_weights()
        self.step += 1
        t4 = time.perf_counter()

        # 7. Metrics.
        return self._metrics(groups, prompts, batch["scores"], learn, t0, t1, t2, t3, t4, sync_s)

    def _metrics(self, groups, prompts, scores, learn, t0, t1, t2, t3, t4, sync_s) -> StepMetrics:
        completions = [c for group in groups for c in group]
        lengths = [len(c.token_ids) for c in completions]
        generated = sum(lengths)
        return StepMetrics(
            step=self.step,
            reward_mean=float(scores.mean()),
            reward_std=float(scores.std(correction=0)),
            kl=learn.get("kl"),
            clip_frac=learn["clip_frac_high"] + learn["clip_frac_low"],
            dual_clip_frac=learn["dual_clip_frac"],
            pg_loss=learn["pg_loss"],
            loss=learn["loss"],
            entropy=learn["entropy"],
            approx_kl=learn["approx_kl"],
            max_abs_log_ratio=learn["max_abs_log_ratio"],
            logprob_mismatch=learn["logprob_mismatch"],
            grad_norm=learn["grad_norm"],
            optimizer_steps=int(learn["optimizer_steps"]),
            skipped_steps=int(learn["skipped_steps"]),
            response_length_mean=generated / len(completions),
            truncated_fraction=sum(c.finish_reason == "length" for c in completions)
            / len(completions),
            prompt_tokens=sum(len(p) for p in prompts) * self.config.group_size,
            generated_tokens=generated,
            tokens_per_second=generated / (t4 - t0),
            time_generate_s=t1 - t0,
            time_reward_s=t2 - t1,
            time_learn_s=t3 - t2,
            time_sync_s=sync_s,
            time_step_s=t4 - t0,
        )
