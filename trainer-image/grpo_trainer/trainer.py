"""The GRPO step loop: sample -> generate -> reward -> advantages -> update -> sync -> metrics.

``Trainer`` owns no Ray actors of its own making: it is handed an ``EnginePool``, a
``LearnerGroup``, the prompts and a reward function, so tests and the CLI wire it the same way
(``grpo_trainer.run``); it connects the two by a ``WeightChannel`` when it is built. Rollouts
go through a ``RolloutLedger`` (prompt-group lineage; with a journal they survive a crash).
Before every step its ``gates`` may stop the run (budget, SIGTERM); after every step it calls its
``after_step`` hooks with the step's ``StepMetrics``: the reporter and checkpoints
(``attempt.py``), using ``state_dict()`` for the driver-side state. With an ``Evaluator``, a
step whose weights are due for evaluation (``evaluation.py``) is evaluated after its sync, and
its metrics carry the evaluation.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from grpo_trainer.algorithm_settings import AlgorithmSettings
from grpo_trainer.batch import build_batch
from grpo_trainer.data import PromptDataset, PromptRow
from grpo_trainer.dynamic_sampling import DynamicSampling
from grpo_trainer.evaluation import Evaluation, Evaluator
from grpo_trainer.journal.ledger import SIBLING, RolloutLedger
from grpo_trainer.learner.group import LearnerGroup
from grpo_trainer.learner.update import REJECTED, UpdatePlan
from grpo_trainer.rewards.batch import Reward, RewardFailures, RewardItem, scored
from grpo_trainer.rollout.engine import SamplingSettings
from grpo_trainer.rollout.pool import EnginePool
from grpo_trainer.sampler import PromptSampler
from grpo_trainer.step_metrics import StepMetrics
from grpo_trainer.sync_errors import WeightSyncMismatchError
from grpo_trainer.weight_channel import WeightChannel

log = logging.getLogger(__name__)

AfterStepHook = Callable[["Trainer", StepMetrics], None]
Gate = Callable[["Trainer"], str | None]
"""Returns why the run must stop before the next step (None: go on)."""
TokenHook = Callable[[int, int], None]
"""Called with (prompt tokens, generated tokens) of each sealed completion."""
MAX_AUTO_MICRO_BATCH = 16


@dataclass(frozen=True)
class TrainerConfig:
    """The loop's settings, from the run's spec (``from_spec``)."""

    max_steps: int
    group_size: int
    prompts_per_step: int
    ppo_epochs: int
    mini_batch_size: int  # global sequences per optimizer step
    micro_batch_size: int | None  # per rank; None: the largest divisor <= 16 of the rank's share
    max_grad_norm: float
    max_response_tokens: int
    top_p: float
    top_k: int | None
    seed: int
    algorithm: AlgorithmSettings
    max_logprob_mismatch: float | None = None  # the parity guard's limit; None: no guard
    generation_rounds: int = 1  # > 1: dynamic sampling, up to this many rounds per step

    @classmethod
    def from_spec(cls, spec: Any) -> TrainerConfig:
        """From the contract's ``GRPORunSpec`` (``grpo_operator.api.spec``): its algorithm and
        the parity guard's limit for its sampling, engine and learner
        (``RolloutSpec.logprob_mismatch_limit``)."""
        algorithm = spec.algorithm
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
            top_k=algorithm.top_k,
            seed=algorithm.seed,
            algorithm=AlgorithmSettings.from_algorithm(
                algorithm.model_dump(by_alias=True, mode="json")
            ),
            max_logprob_mismatch=spec.rollout.logprob_mismatch_limit(
                algorithm.top_p, spec.learner.dtype, algorithm.top_k),
            generation_rounds=algorithm.generation_rounds(),
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
            max_logprob_mismatch=self.max_logprob_mismatch,
        )


class Trainer:
    """Runs GRPO steps until ``config.max_steps``.

    Raises ``WeightSyncIncompleteError`` from a sync that left engine parameters without a
    value, and ``WeightSyncMismatchError`` from a step the learners refused to train on (its
    rollouts did not come from the learners' weights).
    """

    def __init__(
        self,
        config: TrainerConfig,
        dataset: PromptDataset,
        reward_fn: Reward,
        engines: EnginePool,
        learners: LearnerGroup,
        pad_id: int,
        colocated: bool = False,
        after_step: Sequence[AfterStepHook] = (),
        rollouts: RolloutLedger | None = None,
        gates: Sequence[Gate] = (),
        on_tokens: TokenHook | None = None,
        interrupt: Callable[[], bool] = lambda: False,
        evaluator: Evaluator | None = None,
    ) -> None:
        self.config = config
        self.dataset = dataset
        self.reward_fn = reward_fn
        self.engines = engines
        self.learners = learners
        self.pad_id = pad_id
        self.colocated = colocated
        self.after_step = list(after_step)
        self.rollouts = rollouts or RolloutLedger(SIBLING)
        self.gates = list(gates)
        self.on_tokens = on_tokens
        self.interrupt = interrupt  # True: abandon the step after its rollouts (SIGTERM)
        self.evaluator = evaluator
        self.stopped: str | None = None  # why train() returned early
        self.plan = config.update_plan(learners.world_size)
        self.sampler = PromptSampler(len(dataset), config.prompts_per_step, config.seed)
        self.sampling = SamplingSettings(
            group_size=config.group_size,
            max_tokens=config.max_response_tokens,
            temperature=config.algorithm.temperature,
            top_p=config.top_p,
            top_k=config.top_k,
        )
        self.step = 0  # optimizer steps completed (the weights' version)
        self.weights = WeightChannel(learners, engines)

    def state_dict(self) -> dict[str, Any]:
        """Driver-side state a checkpoint needs (the learners hold model and optimizer; the
        rollout ledger is saved apart). JSON-serialisable."""
        version, internal, gauss = random.getstate()
        return {
            "step": self.step,
            "sampler": self.sampler.state_dict(),
            "python_rng": [version, list(internal), gauss],
            "torch_rng": torch.get_rng_state().tolist(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = state["step"]
        self.sampler.load_state_dict(state["sampler"])
        version, internal, gauss = state["python_rng"]
        random.setstate((version, tuple(internal), gauss))
        torch.set_rng_state(torch.tensor(state["torch_rng"], dtype=torch.uint8))

    def train(self) -> list[StepMetrics]:
        """Sync the engines with the learners, then step until ``max_steps`` or until a gate
        or an interrupt stops the run (``self.stopped`` says why)."""
        self.sync_weights()
        history = []
        self.stopped = None
        while self.step < self.config.max_steps:
            self.stopped = next((r for gate in self.gates if (r := gate(self))), None)
            if self.stopped:
                break
            metrics = self.train_step()
            if metrics is None:
                break
            log.info("%s", metrics.progress_line())
            if metrics.evaluation is not None:
                log.info("%s", metrics.evaluation.line())
            for hook in self.after_step:
                hook(self, metrics)
            history.append(metrics)
        if self.stopped:
            log.warning("stopping before step %d: %s", self.step + 1, self.stopped)
        return history

    def sync_weights(self) -> float:
        """Put the learners' weights into every engine; returns the seconds it took."""
        start = time.perf_counter()
        self.weights.sync()
        return time.perf_counter() - start

    def _seeds(self, count: int, round_: int = 0) -> list[int]:
        """One sampling seed per prompt of this step's generation round ``round_`` (vLLM gives
        child i ``seed + i``)."""
        key = f"{self.config.seed}/{self.step}" + (f"/{round_}" if round_ else "")
        base = random.Random(key).getrandbits(48)
        return [base + i * self.config.group_size for i in range(count)]

    def _by_group(self, rows: list[PromptRow]) -> dict[str, PromptRow]:
        """The open step's rows by group id (a group's id is its position in the step)."""
        return {f"{self.step}.{p}": row for p, row in enumerate(rows)}

    def _draw(self, drawn: list[int]) -> list[PromptRow]:
        """The sampler's next prompts (their indices appended to ``drawn``)."""
        indices = self.sampler.next_batch()
        drawn += indices
        return [self.dataset.rows[i] for i in indices]

    def train_step(self) -> StepMetrics | None:
        """One GRPO step; returns its metrics (``self.step`` is then one higher), or None when
        ``interrupt`` abandoned it after its rollouts (``self.step`` unchanged)."""
        t0 = time.perf_counter()

        # 1. Sample this step's prompts (seeded, resumable) and open their prompt groups.
        sampler_state = self.sampler.state_dict()  # to rewind an abandoned step
        drawn: list[int] = []
        rows = self._draw(drawn)
        self.rollouts.open_step(self.step, [row.index for row in rows],
                                self._seeds(len(rows)), self.config.group_size)

        # 2-3. Generate what the ledger still lacks, score and seal each completion; with
        # dynamic sampling, more rounds of prompts while too few groups have a spread.
        reward_s, reward_failures = self._rollouts(rows)
        rounds = self.config.generation_rounds
        sampling = DynamicSampling(self.config.prompts_per_step) if rounds > 1 else None
        while sampling is not None:
            sampling.judge(self.rollouts.group_scores())
            if sampling.full or sampling.rounds == rounds:
                break
            more = self._draw(drawn)
            self.rollouts.add_groups([row.index for row in more],
                                     self._seeds(len(more), sampling.rounds),
                                     self.config.group_size)
            rows += more
            more_s, more_failures = self._rollouts(rows)
            reward_s += more_s
            reward_failures.add(more_failures)
            sampling.rounds += 1
        chosen = sampling.chosen() if sampling is not None else None
        groups, scores = self.rollouts.batch(chosen)
        by_group = self._by_group(rows)
        trained = [by_group[g] for g in chosen] if chosen is not None else rows
        prompts = [list(row.prompt_ids) for row in trained]
        t2 = time.perf_counter()
        t1 = t2 - reward_s  # generating and scoring interleave; scoring time is summed apart
        if self.interrupt():  # the step is redone on resume, from the journaled rollouts
            self.sampler.load_state_dict(sampler_state)
            self.stopped = "interrupted after the step's rollouts (they are journaled)"
            return None

        # 4. Group-relative advantages and the padded batch.
        batch = build_batch(prompts, groups, scores, self.pad_id, self.config.algorithm)

        # 5. Update the policy (colocated engines give their GPU memory back meanwhile).
        if self.colocated:
            self.engines.sleep()
        learn = self.learners.update(batch, self.plan, self.config.mini_batch_size)
        if self.colocated:
            self.engines.wake_up()
        if learn.get(REJECTED):  # the parity guard: nothing was trained on
            raise WeightSyncMismatchError(
                learn["logprob_mismatch"], self.config.max_logprob_mismatch, self.step + 1
            )
        t3 = time.perf_counter()

        # 6. Sync the new weights into the engines.
        sync_s = self.sync_weights()
        self.step += 1
        self.rollouts.close_step()
        t4 = time.perf_counter()

        # 7. Evaluate the new weights, when due; 8. metrics.
        evaluation = None
        if self.evaluator is not None and self.evaluator.due(self.step):
            evaluation = self.evaluator.run(self.engines, self.step)
            self.rollouts.spent_on_evaluation(evaluation.prompt_tokens,
                                              evaluation.generated_tokens)
        return self._metrics(groups, prompts, batch["scores"], learn, t0, t1, t2, t3, t4, sync_s,
                             tuple(drawn), evaluation, reward_failures, sampling)

    def _rollouts(self, rows) -> tuple[float, RewardFailures]:
        """Generate the missing completions of the open groups, score them (a batch reward all
        at once) and seal each one as soon as it is scored; returns the seconds spent scoring
        (not sealing) and the completions the reward failed."""
        requests = self.rollouts.requests()
        if not requests:
            return 0.0, RewardFailures()
        attempts = self.rollouts.dispatch(requests)
        by_group = self._by_group(rows)
        try:
            outputs = self.engines.generate(
                [list(by_group[r.group_id].prompt_ids) for r in requests],
                [r.seed for r in requests], self.sampling, counts=[r.n for r in requests])
        except Exception:
            self.rollouts.fail([a for ids in attempts for a in ids])
            raise
        generated = [(req, attempt_id, completion, by_group[req.group_id])
                     for req, ids, completions in zip(requests, attempts, outputs, strict=True)
                     for attempt_id, completion in zip(ids, completions, strict=True)]
        items = [RewardItem(completion.text, row.ground_truth, row.data_source)
                 for _, _, completion, row in generated]
        # Each completion is sealed (journaled) the moment its score is known: a crash loses
        # only what was still being scored.
        failures = RewardFailures()
        stream = scored(self.reward_fn, items, failures)
        reward_s = 0.0
        while True:
            start = time.perf_counter()  # the reward's time, not the sealing's
            item = next(stream, None)
            reward_s += time.perf_counter() - start
            if item is None:
                return reward_s, failures
            index, score = item
            req, attempt_id, completion, row = generated[index]
            self.rollouts.seal(req.group_id, attempt_id, completion, score, len(row.prompt_ids))
            if self.on_tokens is not None:
                self.on_tokens(len(row.prompt_ids), len(completion.token_ids))

    def _metrics(self, groups, prompts, scores, learn, t0, t1, t2, t3, t4, sync_s,
                 indices, evaluation: Evaluation | None,
                 reward_failures: RewardFailures,
                 sampling: DynamicSampling | None) -> StepMetrics:
        completions = [c for group in groups for c in group]
        lengths = [len(c.token_ids) for c in completions]
        generated = sum(lengths)
        return StepMetrics(
            step=self.step,
            reward_mean=float(scores.mean()),
            reward_std=float(scores.std(correction=0)),
            kl=learn.get("kl"),
            clip_frac_high=learn["clip_frac_high"],
            clip_frac_low=learn["clip_frac_low"],
            dual_clip_frac=learn["dual_clip_frac"],
            pg_loss=learn["pg_loss"],
            loss=learn["loss"],
            entropy=learn["entropy"],
            approx_kl=learn["approx_kl"],
            max_abs_log_ratio=learn["max_abs_log_ratio"],
            logprob_mismatch=learn["logprob_mismatch"],
            grad_norm=learn["grad_norm"],
            learning_rate=learn["learning_rate"],
            optimizer_steps=int(learn["optimizer_steps"]),
            skipped_steps=int(learn["skipped_steps"]),
            response_length_mean=generated / len(completions),
            response_length_max=max(lengths),
            truncated_fraction=sum(c.finish_reason == "length" for c in completions)
            / len(completions),
            prompt_tokens=sum(len(p) for p in prompts) * self.config.group_size,
            generated_tokens=generated,
            tokens_per_second=generated / (t4 - t0),
            time_generate_s=t1 - t0,
            time_reward_s=t2 - t1,
            time_learn_s=t3 - t2,
            time_old_logprobs_s=learn.get("time_old_logprobs_s"),
            time_ref_logprobs_s=learn.get("time_ref_logprobs_s"),
            time_update_s=learn["time_update_s"],
            time_sync_s=sync_s,
            time_step_s=t4 - t0,
            mismatch_kl=learn.get("mismatch_kl"),
            is_weight_mean=learn.get("is_weight_mean"),
            is_effective_sample_size=learn.get("is_effective_sample_size"),
            is_outside_fraction=learn.get("is_outside_fraction"),
            reward_failures=reward_failures,
            generation_rounds=sampling.rounds if sampling else None,
            filtered_groups=sampling.filtered if sampling else None,
            shortfall_groups=sampling.shortfall if sampling else None,
            prompt_indices=indices,
            scores=tuple(float(x) for x in scores.tolist()),
            evaluation=evaluation,
        )

