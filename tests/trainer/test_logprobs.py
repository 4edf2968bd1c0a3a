import pytest
import torch

from grpo_trainer.logprobs import logprobs_and_entropy, token_logprobs


def _inputs(seed=0, batch=3, length=11, vocab=37, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(batch, length, vocab, generator=gen, dtype=torch.float64) * 4).to(dtype)
    labels = torch.randint(0, vocab, (batch, length), generator=gen)
    return logits, labels


def _reference(logits, labels, temperature):
    log_p = torch.log_softmax(logits.double() / temperature, dim=-1)  # (B, T, V)
    picked = log_p.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    entropy = -(log_p.exp() * log_p).sum(-1)
    return picked, entropy


@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.7])
@pytest.mark.parametrize("chunk_tokens", [1, 4, 7, 10_000])
def test_matches_log_softmax_gather_in_float64(temperature, chunk_tokens):
    logits, labels = _inputs()
    logprobs, entropy = logprobs_and_entropy(logits, labels, temperature, chunk_tokens)
    expected_logprobs, expected_entropy = _reference(logits, labels, temperature)
    assert logprobs.dtype == torch.float64
    torch.testing.assert_close(logprobs, expected_logprobs, rtol=0, atol=1e-12)
    torch.testing.assert_close(entropy, expected_entropy, rtol=0, atol=1e-12)
    torch.testing.assert_close(token_logprobs(logits, labels, temperature, chunk_tokens), logprobs)


def test_temperature_is_applied():
    logits, labels = _inputs()
    assert not torch.allclose(token_logprobs(logits, labels, 0.5), token_logprobs(logits, labels))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_low_precision_logits_are_upcast(dtype):
    logits, labels = _inputs(dtype=dtype)
    logprobs, entropy = logprobs_and_entropy(logits, labels, 0.8, chunk_tokens=5)
    expected_logprobs, expected_entropy = _reference(logits, labels, 0.8)  # same rounded logits
    assert logprobs.dtype == torch.float32
    torch.testing.assert_close(logprobs.double(), expected_logprobs, rtol=0, atol=1e-4)
    torch.testing.assert_close(entropy.double(), expected_entropy, rtol=0, atol=1e-4)


def test_gradient_through_chunks_matches_reference():
    logits, labels = _inputs(seed=3)
    weights = torch.randn(labels.shape, dtype=torch.float64)
    chunked = logits.clone().requires_grad_()
    logprobs, entropy = logprobs_and_entropy(chunked, labels, 0.7, chunk_tokens=4)
    (logprobs * weights).sum().backward()
    reference = logits.clone().requires_grad_()
    (_reference(reference, labels, 0.7)[0] * weights).sum().backward()
    torch.testing.assert_close(chunked.grad, reference.grad, rtol=0, atol=1e-12)
    assert logprobs.requires_grad and not entropy.requires_grad


def test_no_grad_mode_and_no_entropy():
    logits, labels = _inputs()
    logits.requires_grad_()
    with torch.no_grad():
        logprobs, entropy = logprobs_and_entropy(logits, labels, with_entropy=False)
    assert entropy is None and not logprobs.requires_grad


def test_empty_sequence_axis():
    logits, labels = _inputs(length=0)
    logprobs, entropy = logprobs_and_entropy(logits, labels)
    assert logprobs.shape == entropy.shape == (3, 0)


def test_rejects_bad_arguments():
    logits, labels = _inputs()
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(logits, labels, 0.0)
    with pytest.raises(ValueError, match="labels"):
        token_logprobs(logits, labels[:, :3])
    with pytest.raises(ValueError, match="chunk_tokens"):
        token_logprobs(logits, labels, chunk_tokens=0)
