"""The learner's forward pass: logprobs of the response tokens of a padded batch."""

from __future__ import annotations

import torch
from torch import Tensor

from grpo_trainer.logprobs import logprobs_and_entropy


def response_logprobs(
    model: torch.nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    response_width: int,
    temperature: float,
    with_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Logprobs (and entropy) of the last ``response_width`` tokens of each row.

    Args:
        input_ids: (B, Lp + Tr) left-padded prompt ++ right-padded response.
        attention_mask: (B, Lp + Tr) 1 on real tokens.
        response_width: Tr.

    Returns:
        (B, Tr) logprobs at ``temperature`` (fp32) and (B, Tr) entropy or None.
    """
    # Left padding: positions count real tokens only, as the engine numbered them.
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (B, L)
    # The head only at the positions that predict a response token (as TRL's logits_to_keep):
    # a prompt's logits are never used, and with a large vocabulary they are most of the
    # head's work and of the activations kept for the backward pass.
    logits = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=False,
        logits_to_keep=response_width + 1,
    ).logits  # (B, Tr + 1, V)
    logits = logits[:, :-1]  # (B, Tr, V): position t predicts token t+1
    labels = input_ids[:, -response_width:]  # (B, Tr)
    return logprobs_and_entropy(logits, labels, temperature, with_entropy=with_entropy,
                                entropy_grad=entropy_grad)


@torch.no_grad()
def batched_logprobs(
    model: torch.nn.Module,
    batch: dict[str, Tensor],
    temperature: float,
    micro_batch_size: int,
) -> Tensor:
    """(N, Tr) logprobs of ``batch``'s responses, micro-batch by micro-batch, without grad."""
    width = batch["response_mask"].shape[1]
    n = batch["input_ids"].shape[0]
    parts = [
        response_logprobs(
            model,
            batch["input_ids"][i : i + micro_batch_size],
            batch["attention_mask"][i : i + micro_batch_size],
            width,
            temperature,
        )[0]
        for i in range(0, n, micro_batch_size)
    ]
    return torch.cat(parts, dim=0)
