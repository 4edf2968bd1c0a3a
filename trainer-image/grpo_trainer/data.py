"""Training prompts from parquet in verl's layout, rendered and tokenised once at start.

Columns: ``prompt`` (a list of chat messages ``{role, content}``, or a plain string),
``reward_model`` (a struct with ``ground_truth``) and ``data_source`` (a string; optional).

Rendering: chat messages go through the tokenizer's chat template with
``add_generation_prompt=True`` and are then encoded without adding special tokens (a template
writes its own). A tokenizer without a chat template gets a documented plain join,
``"{role}: {content}\\n"`` per message followed by ``"assistant: "``. A string prompt is used
as is, encoded with the tokenizer's defaults.

Length rule (the contract's ``maxPromptTokens``): prompts longer than ``max_prompt_tokens``
tokens are filtered out, never truncated (a cut prompt may lose the question); the number
dropped is reported. A dataset left empty is an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

PLAIN_ASSISTANT_PREFIX = "assistant: "


class DatasetError(ValueError):
    """The dataset cannot be used (missing file or column, wrong type, nothing left)."""


@dataclass(frozen=True)
class PromptRow:
    """One training prompt, tokenised."""

    index: int  # row number in the parquet file
    prompt_ids: tuple[int, ...]
    ground_truth: str
    data_source: str


@dataclass(frozen=True)
class PromptDataset:
    rows: tuple[PromptRow, ...]
    dropped_too_long: int

    def __len__(self) -> int:
        return len(self.rows)


def render_prompt(prompt: Any, tokenizer) -> list[int]:
    """Token ids of one ``prompt`` cell (chat messages or text); see the module docstring."""
    if isinstance(prompt, str):
        return list(tokenizer.encode(prompt))
    if not isinstance(prompt, list) or not all(
        isinstance(m, dict) and "role" in m and "content" in m for m in prompt
    ):
        raise DatasetError(f"prompt must be text or a list of {{role, content}}, got {prompt!r}")
    messages = [{"role": m["role"], "content": m["content"]} for m in prompt]
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    else:
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
        text += PLAIN_ASSISTANT_PREFIX
    return list(tokenizer.encode(text, add_special_tokens=False))


def count_rows(path: str | Path) -> int:
    """Rows of a parquet file, from its footer (an upper bound of the prompts it yields)."""
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path).metadata.num_rows
    except (OSError, ValueError) as err:
        raise DatasetError(f"cannot read dataset {path}: {err}") from err


def load_prompts(path: str | Path, tokenizer, max_prompt_tokens: int) -> PromptDataset:
    """Read, render and filter a verl-layout parquet file (opened read-only)."""
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as err:
        raise DatasetError(f"cannot read dataset {path}: {err}") from err
    for column in ("prompt", "reward_model"):
        if column not in table.column_names:
            raise DatasetError(f"{path}: missing column {column!r} (verl layout)")
    prompts = table.column("prompt").to_pylist()
    rewards = table.column("reward_model").to_pylist()
    sources = (
        table.column("data_source").to_pylist()
        if "data_source" in table.column_names
        else [""] * len(prompts)
    )
    rows, dropped = [], 0
    for index, (prompt, reward, source) in enumerate(zip(prompts, rewards, sources, strict=True)):
        if not isinstance(reward, dict) or "ground_truth" not in reward:
            raise DatasetError(f"{path}: row {index}: reward_model.ground_truth is missing")
        ids = render_prompt(prompt, tokenizer)
        if len(ids) > max_prompt_tokens:
            dropped += 1
            continue
        truth = reward["ground_truth"]
        rows.append(PromptRow(index, tuple(ids), "" if truth is None else str(truth), source or ""))
    if not rows:
        raise DatasetError(
            f"{path}: no prompt fits maxPromptTokens={max_prompt_tokens} "
            f"({dropped} of {len(prompts)} rows were longer)"
        )
    return PromptDataset(tuple(rows), dropped)
