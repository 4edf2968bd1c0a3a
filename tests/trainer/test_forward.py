"""The learner's forward pass computes the head only where a response token is predicted, and
gives the logprobs, entropy and gradients of the whole-sequence computation."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from grpo_trainer.learner.forward import response_logprobs
from grpo_trainer.logprobs import logprobs_and_entropy
from grpo_trainer.toy import make_tiny_model

PROMPT, RESPONSE = 7, 5


def _batch(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows: a left-padded prompt and a right-padded response, as the batch lays them."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (2, PROMPT + RESPONSE), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # a shorter prompt
    mask[1, -2:] = 0  # a shorter response
    return ids * mask, mask


def _whole_sequence(model, ids, mask, temperature):
    """What the forward pass computed before: every position's logits, then the slice."""
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids,
                   use_cache=False).logits[:, -RESPONSE - 1 : -1]
    return logprobs_and_entropy(logits, ids[:, -RESPONSE:], temperature, with_entropy=True,
                                entropy_grad=True)


@pytest.mark.parametrize("tied", [False, True], ids=["llama", "qwen2-tied-head"])
def test_logprobs_entropy_and_gradients_match_the_whole_sequence_head(tmp_path, tied):
    model = AutoModelForCausalLM.from_pretrained(
        make_tiny_model(tmp_path / "model", tie_word_embeddings=tied), dtype=torch.float32)
    ids, mask = _batch(model.config.vocab_size)
    head = model.get_output_embeddings().weight

    logprobs, entropy = response_logprobs(model, ids, mask, RESPONSE, 0.7, with_entropy=True,
                                          entropy_grad=True)
    (logprobs.sum() + entropy.sum()).backward()
    grad = head.grad.clone()
    model.zero_grad()
    want_logprobs, want_entropy = _whole_sequence(model, ids, mask, 0.7)
    (want_logprobs.sum() + want_entropy.sum()).backward()

    assert logprobs.shape == (2, RESPONSE)
    torch.testing.assert_close(logprobs, want_logprobs)
    torch.testing.assert_close(entropy, want_entropy)
    torch.testing.assert_close(grad, head.grad)
