"""The CPU rollout engine: its model runs in the engine's own process on its pod's cores, and a
completion's text is its token ids decoded whole."""

from __future__ import annotations

import os
import re

from transformers import AutoTokenizer

from grpo_trainer.rollout.engine import SamplingSettings


def test_the_engine_runs_in_its_actors_process_on_every_core_of_its_node(engines):
    import ray

    where = ray.get(engines.engines[0].describe.remote())
    found = re.fullmatch(r"engine core (.+), (\d+) child processes, (\d+) torch threads, "
                         r"cores=\[([\d, ]+)\]", where)
    assert found, where
    cores = [int(c) for c in found.group(4).split(",")]
    assert found.group(1) == "in-process" and found.group(2) == "0", where
    # The pod's cores: its affinity, as many as its Ray node has CPUs.
    node_cpus = int(ray.cluster_resources()["CPU"])
    assert cores == sorted(os.sched_getaffinity(0))[:node_cpus], where
    assert int(found.group(3)) == len(cores), where


def test_a_completions_text_is_its_tokens_decoded_whole(engines, tiny_dirs):
    tokenizer = AutoTokenizer.from_pretrained(tiny_dirs["model"])
    prompts = [tokenizer.encode(text) for text in ("the blue apple", "please say", "data")]
    groups = engines.generate(prompts, [7, 70, 700], SamplingSettings(group_size=8, max_tokens=24))
    completions = [c for group in groups for c in group]
    # The toy model's bytes often end mid-character: vLLM's own incremental text would drop it.
    texts = [tokenizer.decode(c.token_ids, skip_special_tokens=True) for c in completions]
    assert [c.text for c in completions] == texts
    assert any(text.endswith("\ufffd") for text in texts)
