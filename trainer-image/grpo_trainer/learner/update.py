"""One step's policy update on one learner rank: epochs x mini-batches x micro-batches.

Per mini-batch (one optimizer step): global counts are all-reduced first, each micro-batch's
``grpo_loss`` is backpropagated (gradients accumulate by summation), gradients are summed across
ranks, clipped to ``max_grad_norm``, and the optimizer steps — unless the gradient norm is not
finite, in which case the gradients are dropped and the update is counted as skipped (every rank
sees the same reduced norm, so all ranks skip together).

Metrics follow ``grpo_loss``'s rule: per mini-batch the shares are summed over micro-batches and
ranks; the step's value is the mean over its mini-batches. The rollout correction's importance
weights are taken per micro-batch from its old-policy and engine logprobs (row-local, so the
split changes nothing); its effective sample size comes from the step's mean weight and mean
squared weight.

The parity guard: ``logprob_mismatch``, the mean |old-policy − engine| logprob per response
token over all ranks, is checked against ``plan.max_logprob_mismatch`` before the step's first
optimizer step — with precomputed old logprobs before anything else, in the single-step plan
(old logprobs from the update's own forward) after the mini-batch's backward passes. Over the
limit, the rollouts did not come from the learner's weights (a stale or broken sync): no
optimizer step is taken (every rank sees the same reduced figure, so all ranks refuse together)
and the result says so (``REJECTED``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from grpo_trainer.aggregation import BatchCounts
from grpo_trainer.algorithm_settings import AlgorithmSettings
from grpo_trainer.learner.forward import response_logprobs
from grpo_trainer.learner.parallel import DataParallel
from grpo_trainer.loss import grpo_loss
from grpo_trainer.rollout_correction import effective_sample_size


@dataclass(frozen=True)
class UpdatePlan:
    """Batch sizes as one rank sees them."""

    ppo_epochs: int
    mini_batch_per_rank: int  # sequences per optimizer step on this rank
    micro_batch_size: int  # sequences per forward/backward
    max_grad_norm: float
    response_width: int  # maxResponseTokens (BatchCounts' constant width)
    max_logprob_mismatch: float | None = None  # the parity guard's limit; None: no guard

    def single_step(self, rows: int) -> bool:
        """One optimizer step over ``rows`` sequences: the update's first forward runs the
        old policy itself."""
        return self.ppo_epochs == 1 and self.mini_batch_per_rank >= rows


REJECTED = "rejected"
"""Result key, 1.0 when the parity guard refused the step (see the module docstring)."""


def _gap_sums(old: Tensor, engine: Tensor, mask: Tensor) -> Tensor:
    """[Σ |old − engine| over response tokens, their count]."""
    mask = mask.bool()
    gap = torch.where(mask, (old - engine).abs(), 0.0)
    return torch.stack([gap.sum(), mask.sum().float()])


def _mismatch(sums: Tensor, dp: DataParallel) -> float:
    """The mean gap per token over all ranks (a collective: every rank calls)."""
    total = dp.all_reduce_sum(sums)
    return float(total[0] / total[1].clamp(min=1))


def _over(mismatch: float, plan: UpdatePlan) -> bool:
    # `not <=` so that a NaN figure is refused too.
    return plan.max_logprob_mismatch is not None and not mismatch <= plan.max_logprob_mismatch


def _rejected(mismatch: float) -> dict[str, float]:
    return {"logprob_mismatch": mismatch, "optimizer_steps": 0.0, "skipped_steps": 0.0,
            REJECTED: 1.0}


def _counts(mask: Tensor, width: int, dp: DataParallel) -> BatchCounts:
    local = BatchCounts.of(mask, width)
    total = dp.all_reduce_sum(torch.tensor([local.num_tokens, local.num_sequences]))
    return BatchCounts(float(total[0]), float(total[1]), width)


def update_policy(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    shard: dict[str, Tensor],
    plan: UpdatePlan,
    settings: AlgorithmSettings,
    dp: DataParallel,
) -> dict[str, float]:
    """Train on this rank's ``shard`` (rows ordered mini-batch by mini-batch, see
    ``grpo_trainer.batch.shard_batch``; it carries ``engine_log_prob``, ``old_log_prob`` unless
    ``plan.single_step`` — then each micro-batch's own forward is the old policy's — and, with
    klCoef > 0, ``ref_log_prob``). Returns the step's metrics (identical on every rank), with
    ``logprob_mismatch``: the mean |old-policy − engine| logprob per response token. When that
    is over ``plan.max_logprob_mismatch``, returns only ``logprob_mismatch``, zero steps and
    ``REJECTED``, the parameters and the optimizer state untouched."""
    params = [p for p in model.parameters() if p.requires_grad]
    n = shard["input_ids"].shape[0]
    precomputed = "old_log_prob" in shard
    if not precomputed and not plan.single_step(n):
        raise ValueError("old_log_prob is required unless the update is a single step")
    mismatch = None
    if precomputed:
        mismatch = _mismatch(
            _gap_sums(shard["old_log_prob"], shard["engine_log_prob"], shard["response_mask"]), dp
        )
        if _over(mismatch, plan):
            return _rejected(mismatch)
    width = shard["response_mask"].shape[1]
    sums: dict[str, float] = {}
    updates = skipped = 0
    max_log_ratio = torch.zeros(())
    # Single-step plan: |old - engine| summed over response tokens, and their count.
    gaps = torch.zeros(2, device=shard["response_mask"].device)
    for _ in range(plan.ppo_epochs):
        for start in range(0, n, plan.mini_batch_per_rank):
            mini = {k: v[start : start + plan.mini_batch_per_rank] for k, v in shard.items()}
            counts = _counts(mini["response_mask"], plan.response_width, dp)
            shares: dict[str, Tensor] = {}
            for m0 in range(0, mini["input_ids"].shape[0], plan.micro_batch_size):
                micro = {k: v[m0 : m0 + plan.micro_batch_size] for k, v in mini.items()}
                log_prob, entropy = response_logprobs(
                    model,
                    micro["input_ids"],
                    micro["attention_mask"],
                    width,
                    settings.temperature,
                    with_entropy=True,
                    entropy_grad=settings.entropy_coef > 0,
                )  # (b, Tr) each
                old_log_prob = micro.get("old_log_prob", log_prob.detach())
                mask = micro["response_mask"].bool()
                if not precomputed:
                    gaps += _gap_sums(old_log_prob, micro["engine_log_prob"], mask)
                loss, metrics = grpo_loss(
                    log_prob,
                    old_log_prob,
                    micro["advantages"],
                    micro["response_mask"],
                    counts,
                    settings,
                    ref_log_prob=micro.get("ref_log_prob"),
                    entropy=entropy,
                    engine_log_prob=micro["engine_log_prob"],
                )
                (loss * dp.loss_scale).backward()
                for key, value in metrics.items():
                    shares[key] = shares.get(key, torch.zeros(())) + value
                ratio = torch.where(mask, (log_prob.detach() - old_log_prob).abs(), 0.0)
                max_log_ratio = torch.maximum(max_log_ratio, ratio.max())

            if mismatch is None:  # the single-step plan's only mini-batch, before its step
                mismatch = _mismatch(gaps, dp)
                if _over(mismatch, plan):
                    optimizer.zero_grad(set_to_none=True)
                    return _rejected(mismatch)

            # Sum gradients across ranks, clip, step (or skip a non-finite step).
            dp.reduce_gradients(params)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, plan.max_grad_norm))
            if math.isfinite(grad_norm):
                optimizer.step()
                updates += 1
            else:
                skipped += 1
            optimizer.zero_grad(set_to_none=True)

            keys = sorted(shares)
            reduced = dp.all_reduce_sum(torch.stack([shares[k] for k in keys]).float())
            for key, value in zip(keys, reduced.tolist(), strict=True):
                sums[key] = sums.get(key, 0.0) + value
            sums["grad_norm"] = sums.get("grad_norm", 0.0) + grad_norm
    steps = updates + skipped
    out = {key: value / steps for key, value in sums.items()}
    if "is_weight_sq_mean" in out:
        out["is_effective_sample_size"] = effective_sample_size(
            out["is_weight_mean"], out.pop("is_weight_sq_mean"))
    out["max_abs_log_ratio"] = float(dp.all_reduce_max(max_log_ratio))
    out["logprob_mismatch"] = mismatch
    out["optimizer_steps"] = float(updates)
    out["skipped_steps"] = float(skipped)
    out["learning_rate"] = float(optimizer.param_groups[0]["lr"])
    return out
