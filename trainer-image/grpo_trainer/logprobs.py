"""Token logprobs and entropies from logits at the sampling temperature, chunk by chunk.

For logits z (already shifted so that ``logits[b, t]`` is the distribution that produced
``labels[b, t]``) and temperature T:

    logp[b, t]    = z[b, t, y] / T - logsumexp(z[b, t] / T)
    entropy[b, t] = logsumexp(z[b, t] / T) - sum_v softmax(z[b, t] / T)_v * z[b, t, v] / T

Memory: the (B, T, V) logits are never copied whole. The sequence axis is walked in chunks of
about ``chunk_tokens`` tokens; only one chunk is upcast (bf16/fp16 -> fp32; fp64 stays fp64) at a
time. When a gradient is needed, each chunk runs under activation checkpointing, so backward
recomputes the chunk's fp32 copy instead of keeping every chunk's alive. Entropy is a metric,
computed without gradient, unless the caller asks for its gradient (an entropy bonus in the
loss): then it is computed with the logprobs, under the same checkpoint.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

DEFAULT_CHUNK_TOKENS = 1024


def _compute_dtype(logits: Tensor) -> torch.dtype:
    return torch.promote_types(logits.dtype, torch.float32)


def _scaled(logits: Tensor, temperature: float) -> Tensor:
    """(..., V) logits upcast to at least fp32 and divided by the temperature."""
    z = logits.to(_compute_dtype(logits))
    return z if temperature == 1.0 else z / temperature


def _chunk_logprobs(logits: Tensor, labels: Tensor, temperature: float) -> Tensor:
    """(B, c, V), (B, c) -> (B, c)."""
    z = _scaled(logits, temperature)  # (B, c, V)
    picked = z.gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # (B, c)
    return picked - torch.logsumexp(z, dim=-1)


def _chunk_logprobs_entropy_grad(logits: Tensor, labels: Tensor,
                                 temperature: float) -> tuple[Tensor, Tensor]:
    """(B, c, V), (B, c) -> logprobs (B, c), entropy (B, c), both differentiable."""
    z = _scaled(logits, temperature)  # (B, c, V)
    lse = torch.logsumexp(z, dim=-1)  # (B, c)
    logprobs = z.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - lse
    return logprobs, lse - (torch.softmax(z, dim=-1) * z).sum(dim=-1)


@torch.no_grad()
def _chunk_logprobs_entropy(
    logits: Tensor, labels: Tensor | None, temperature: float
) -> tuple[Tensor | None, Tensor]:
    """(B, c, V), (B, c) -> logprobs (B, c) (None without labels), entropy (B, c); no grad."""
    z = _scaled(logits, temperature)  # (B, c, V)
    lse = torch.logsumexp(z, dim=-1)  # (B, c)
    logprobs = None
    if labels is not None:
        logprobs = z.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - lse  # (B, c)
    weighted = torch.softmax(z, dim=-1).mul_(z)  # (B, c, V): p_v * z_v
    return logprobs, lse - weighted.sum(dim=-1)


def _check(logits: Tensor, labels: Tensor, temperature: float, chunk_tokens: int) -> None:
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(
            f"logits must be (B, T, V) and labels (B, T); got {tuple(logits.shape)} and "
            f"{tuple(labels.shape)}"
        )
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")


def _chunks(logits: Tensor, chunk_tokens: int) -> list[slice]:
    """Slices of the sequence axis holding about ``chunk_tokens`` tokens of the whole batch."""
    batch, length = logits.shape[:2]
    step = max(1, chunk_tokens // max(batch, 1))
    return [slice(start, start + step) for start in range(0, length, step)]


def token_logprobs(
    logits: Tensor,
    labels: Tensor,
    temperature: float = 1.0,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
) -> Tensor:
    """Logprobs of ``labels`` under ``softmax(logits / temperature)``.

    Args:
        logits: (B, T, V) logits, any float dtype; ``logits[b, t]`` predicts ``labels[b, t]``.
        labels: (B, T) token ids in [0, V) (padding positions must hold a valid id too).
        temperature: the sampling temperature.
        chunk_tokens: tokens (over the whole batch) upcast at a time.

    Returns:
        (B, T) logprobs in fp32 (fp64 for fp64 logits); differentiable w.r.t. ``logits``.
    """
    return logprobs_and_entropy(logits, labels, temperature, chunk_tokens, with_entropy=False)[0]


def logprobs_and_entropy(
    logits: Tensor,
    labels: Tensor,
    temperature: float = 1.0,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    with_entropy: bool = True,
    entropy_grad: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Logprobs of ``labels`` and entropy of each position's distribution, detached unless
    ``entropy_grad`` (and a gradient is being recorded).

    Same arguments as ``token_logprobs``; returns ``(logprobs (B, T), entropy (B, T) or None)``.
    """
    _check(logits, labels, temperature, chunk_tokens)
    labels = labels.long()
    needs_grad = torch.is_grad_enabled() and logits.requires_grad
    logprob_chunks, entropy_chunks = [], []
    for span in _chunks(logits, chunk_tokens):
        chunk, chunk_labels = logits[:, span], labels[:, span]  # (B, c, V), (B, c): views
        if needs_grad and with_entropy and entropy_grad:
            lp, ent = checkpoint(_chunk_logprobs_entropy_grad, chunk, chunk_labels, temperature,
                                 use_reentrant=False)
            logprob_chunks.append(lp)
            entropy_chunks.append(ent)
        elif needs_grad:
            logprob_chunks.append(
                checkpoint(_chunk_logprobs, chunk, chunk_labels, temperature, use_reentrant=False)
            )
            if with_entropy:
                entropy_chunks.append(_chunk_logprobs_entropy(chunk, None, temperature)[1])
        elif with_entropy:  # one upcast serves both
            lp, ent = _chunk_logprobs_entropy(chunk, chunk_labels, temperature)
            logprob_chunks.append(lp)
            entropy_chunks.append(ent)
        else:
            logprob_chunks.append(_chunk_logprobs(chunk, chunk_labels, temperature))
    if not logprob_chunks:  # T == 0
        empty = logits.new_zeros(logits.shape[:2], dtype=_compute_dtype(logits))
        return empty, (empty.clone() if with_entropy else None)
    logprobs = torch.cat(logprob_chunks, dim=1)  # (B, T)
    entropy = torch.cat(entropy_chunks, dim=1) if with_entropy else None  # (B, T)
    return logprobs, entropy
