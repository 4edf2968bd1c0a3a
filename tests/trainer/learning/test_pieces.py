"""The trainer's pure pieces: sampler, data rules, batch layout and sharding, placement plans."""

from __future__ import annotations

import pytest
import torch

from grpo_trainer import toy
from grpo_trainer.algorithm_settings import AlgorithmSettings
from grpo_trainer.batch import Completion, build_batch, from_wire, shard_batch, to_wire
from grpo_trainer.data import PLAIN_ASSISTANT_PREFIX, DatasetError, load_prompts, render_prompt
from grpo_trainer.placement import plan_placement
from grpo_trainer.rewards.char_fraction import CharFractionReward
from grpo_trainer.sampler import PromptSampler


def test_sampler_covers_each_epoch_and_resumes_exactly():
    sampler = PromptSampler(10, 4, seed=3)
    draws = [sampler.next_batch() for _ in range(5)]  # 20 rows: two full epochs
    flat = [i for d in draws for i in d]
    assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:]) == list(range(10))
    assert flat[:10] != flat[10:]  # reshuffled per epoch

    resumed = PromptSampler(10, 4, seed=3)
    first = PromptSampler(10, 4, seed=3)
    first.next_batch(), first.next_batch(), first.next_batch()
    resumed.load_state_dict(first.state_dict())
    assert [resumed.next_batch() for _ in range(3)] == [first.next_batch() for _ in range(3)]
    assert PromptSampler(10, 4, seed=3).next_batch() == draws[0]
    with pytest.raises(ValueError, match="cannot resume"):
        PromptSampler(11, 4, seed=3).load_state_dict(first.state_dict())


class _NoTemplate:
    chat_template = None

    def encode(self, text, add_special_tokens=True):
        return [ord(c) for c in text]


def test_prompts_render_with_template_or_plain_join_and_long_ones_are_dropped(tmp_path):
    messages = [{"role": "user", "content": "hi"}]
    plain = render_prompt(messages, _NoTemplate())
    assert "".join(map(chr, plain)) == "user: hi\n" + PLAIN_ASSISTANT_PREFIX

    tokenizer = toy.make_tokenizer()
    ids = render_prompt(messages, tokenizer)
    assert tokenizer.decode(ids) == "<|user|>hi\n<|assistant|>"

    rows = toy.letters_rows(4)
    rows[1]["prompt"] = [{"role": "user", "content": "a " * 200}]
    path = toy.write_parquet(rows, tmp_path / "train.parquet")
    dataset = load_prompts(path, tokenizer, max_prompt_tokens=32)
    assert [r.index for r in dataset.rows] == [0, 2, 3] and dataset.dropped_too_long == 1
    assert dataset.rows[0].ground_truth == "a" and dataset.rows[0].data_source == toy.LETTERS_SOURCE
    with pytest.raises(DatasetError, match="no prompt fits"):
        load_prompts(path, tokenizer, max_prompt_tokens=2)


def _completion(tokens):
    return Completion(tuple(tokens), tuple(-0.5 for _ in tokens), "", "stop")


def test_batch_layout_and_world_size_invariant_shards():
    prompts = [[1, 2, 3], [4]]
    groups = [[_completion([5, 6]), _completion([7])], [_completion([8, 9, 10]), _completion([])]]
    batch = build_batch(prompts, groups, [1.0, 0.0, 0.5, 0.5], 0, AlgorithmSettings())
    assert batch["input_ids"].tolist() == [
        [1, 2, 3, 5, 6, 0], [1, 2, 3, 7, 0, 0], [0, 0, 4, 8, 9, 10], [0, 0, 4, 0, 0, 0]
    ]
    assert batch["attention_mask"][2].tolist() == [0, 0, 1, 1, 1, 1]
    assert batch["response_mask"].tolist() == [[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]]
    assert batch["advantages"][0, 0] > 0 > batch["advantages"][1, 0]
    assert torch.count_nonzero(batch["advantages"][2:]) == 0  # equal scores: no signal

    rows = {"input_ids": torch.arange(8)}
    two = [s["input_ids"].tolist() for s in shard_batch(rows, 2, 4)]
    assert two == [[0, 1, 4, 5], [2, 3, 6, 7]]  # mini-batch k = rows [4k, 4k + 4) on both
    assert [s["input_ids"].tolist() for s in shard_batch(rows, 1, 4)] == [list(range(8))]
    with pytest.raises(ValueError, match="multiple"):
        shard_batch(rows, 3, 4)


def test_a_batch_crosses_to_a_rank_as_arrays_and_comes_back_whole_in_its_own_memory():
    prompts = [[1, 2, 3], [4]]
    groups = [[_completion([5, 6]), _completion([7])], [_completion([8, 9, 10]), _completion([])]]
    batch = build_batch(prompts, groups, [1.0, 0.0, 0.5, 0.5], 0, AlgorithmSettings())
    expected = {name: tensor.clone() for name, tensor in batch.items()}
    wire = to_wire(batch)
    for array in wire.values():
        array.setflags(write=False)  # as Ray may hand over a view of its object store
    back = from_wire(wire)
    assert back.keys() == expected.keys()
    for name, tensor in back.items():
        assert tensor.dtype == expected[name].dtype and torch.equal(tensor, expected[name]), name
        tensor.add_(1)  # the learner's tensors are its own: the object store's view is untouched
        assert torch.equal(torch.from_numpy(wire[name].copy()), expected[name]), name


def test_placement_plans():
    cpu = plan_placement("colocated", 1, workers=2, gpus_per_worker=0)
    assert len(cpu.learners) == 2 and len(cpu.engines) == 1 and not cpu.use_gpu
    assert sum(b["CPU"] for b in cpu.bundles) <= 2  # fits a 2-core machine
    # Colocated: rank 0 shares pod 0 with the engine, rank 1 has pod 1.
    assert cpu.pod_of(cpu.engines[0].actor) == 0
    assert [cpu.pod_of(s) for s in cpu.learners] == [0, 1]

    cpu_split = plan_placement("split", 1, workers=3, gpus_per_worker=0)
    assert cpu_split.pod_of(cpu_split.engines[0].actor) == 0
    assert [cpu_split.pod_of(s) for s in cpu_split.learners] == [1, 2]
    one_pod = plan_placement("split", 1, workers=1, gpus_per_worker=0)
    assert one_pod.pods == 1 and len(one_pod.learners) == 1

    colocated = plan_placement("colocated", 2, workers=2, gpus_per_worker=2)
    assert colocated.colocated and len(colocated.learners) == 4 and len(colocated.engines) == 2
    assert colocated.engines[1].worker_bundles == (2, 3)
    assert colocated.bundle_pods == (0, 0, 1, 1)  # each pod its ranks and its engine
    with pytest.raises(ValueError, match="on one pod"):
        plan_placement("colocated", 4, workers=2, gpus_per_worker=2)

    two_pods = plan_placement("split", 1, workers=2, gpus_per_worker=4)
    assert {two_pods.pod_of(e.actor) for e in two_pods.engines} == {0}
    assert {two_pods.pod_of(s) for s in two_pods.learners} == {1}

    split = plan_placement("split", 2, workers=1, gpus_per_worker=8)
    assert not split.colocated and len(split.engines) == 2
    assert [s.bundle for s in split.learners] == [4, 5, 6, 7]
    with pytest.raises(ValueError, match="at least 3 GPUs"):
        plan_placement("split", 2, workers=1, gpus_per_worker=2)


def test_char_fraction_reward_is_dense():
    reward = CharFractionReward()
    assert reward("aaaa", "a") == 1.0
    assert reward("a b!", "A") == 0.5
    assert reward("", "a") == 0.0 and reward("xyz", None) == 0.0


def test_weight_sync_buckets_are_bounded_single_dtype_and_ordered():
    from grpo_trainer.rollout.weight_sync import TensorSpec, plan_buckets

    specs = [TensorSpec("a", "float32", (3, 4)), TensorSpec("h", "bfloat16", (5,)),
             TensorSpec("b", "float32", (1000,)), TensorSpec("big", "float32", (2000,)),
             TensorSpec("c", "float32", (2,))]
    buckets = plan_buckets(specs, max_bytes=4100)
    assert [[s.name for s in b.specs] for b in buckets] == [["a", "b"], ["h"], ["big"], ["c"]]
    assert [b.nbytes for b in buckets] == [4048, 10, 8000, 8]  # "big" alone, over the bound
    assert all(len({s.dtype for s in b.specs}) == 1 for b in buckets)
    assert plan_buckets(specs) == plan_buckets(list(specs))  # both sides cut the same buckets
    assert [TensorSpec.from_wire(s.to_wire()) for s in specs] == specs
