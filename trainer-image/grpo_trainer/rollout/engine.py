"""A rollout worker: one Ray actor holding one vLLM engine (``vllm.LLM``).

Prompts go in as token ids (``TokensPrompt``) and completions come out as token ids with the
logprob of each sampled token, so nothing is re-tokenised between the engine and the learner.
Each prompt gets ``n = groupSize`` completions from one ``SamplingParams`` with its own seed
(vLLM gives the i-th child ``seed + i``). Logprobs are requested as ``processed_logprobs``:
after temperature scaling, as the learner computes them (vLLM's default is the raw,
pre-temperature logprobs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass, field

from grpo_trainer.batch import Completion
from grpo_trainer.cores import THREADS_ENV, VLLM_CPU_SETTINGS, cpu_engine_env, pod_cores
from grpo_trainer.rollout.weight_sync import EXTENSION_CLS
from grpo_trainer.rollout.weight_transport import GroupAddress, node_ip

ALL_TOKENS = 0  # vLLM's top_k that keeps every token
# KV cache of a CPU engine (vLLM's CPU default is a share of the machine's memory).
CPU_KV_CACHE_BYTES = 256 * 2**20


@dataclass(frozen=True)
class EngineSettings:
    """How to build the engine (from ``spec.rollout`` and the algorithm's lengths)."""

    model_dir: str
    max_model_len: int
    dtype: str = "auto"
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.5
    enable_sleep_mode: bool = False  # colocated GPU placement
    seed: int = 0
    use_gpu: bool = False
    max_num_seqs: int = 256
    env: dict[str, str] = field(default_factory=dict)  # e.g. VLLM_RAY_BUNDLE_INDICES


@dataclass(frozen=True)
class SamplingSettings:
    """Per-step sampling: the algorithm's groupSize, temperature, topP, topK and
    maxResponseTokens."""

    group_size: int
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None  # None: every token


class RolloutEngine:
    """One vLLM engine (instantiate through ``ray.remote``; see ``rollout.pool``)."""

    def __init__(self, settings: EngineSettings) -> None:
        os.environ.update(settings.env)
        if not settings.use_gpu:
            _take_the_pods_cores(settings.tensor_parallel_size)
        from vllm import LLM

        kwargs = {}
        if settings.use_gpu:
            kwargs["gpu_memory_utilization"] = settings.gpu_memory_utilization
            kwargs["enable_sleep_mode"] = settings.enable_sleep_mode
            if settings.tensor_parallel_size > 1:
                kwargs["distributed_executor_backend"] = "ray"
        else:
            kwargs["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
        self.settings = settings
        self.llm = LLM(
            model=settings.model_dir,
            dtype=settings.dtype,
            tensor_parallel_size=settings.tensor_parallel_size,
            max_model_len=settings.max_model_len,
            max_num_seqs=settings.max_num_seqs,
            seed=settings.seed,
            logprobs_mode="processed_logprobs",
            worker_extension_cls=EXTENSION_CLS,
            **kwargs,
        )

    def describe(self) -> str:
        """Where the engine runs, as found once it has started (for the driver's log): where
        its engine core is, how many processes it started, its torch threads and the cores
        they may use."""
        import psutil
        import torch

        core = type(self.llm.llm_engine.engine_core).__name__
        where = "in-process" if core == "InprocClient" else "in its own process"
        children = len(psutil.Process().children(recursive=True))
        return (f"engine core {where}, {children} child processes, "
                f"{torch.get_num_threads()} torch threads, cores={pod_cores()}")

    def generate(
        self,
        prompts: list[list[int]],
        seeds: list[int],
        sampling: SamplingSettings,
        counts: list[int] | None = None,
    ) -> list[list[Completion]]:
        """``counts[i]`` (default ``sampling.group_size``) completions of prompt i, child j
        seeded ``seeds[i] + j`` by vLLM (token ids in, token ids out). A sibling regenerated
        alone is asked for with ``n=1`` and its slot's seed."""
        counts = counts or [sampling.group_size] * len(prompts)
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = [
            SamplingParams(
                n=n,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=sampling.top_k or ALL_TOKENS,
                max_tokens=sampling.max_tokens,
                logprobs=0,
                seed=seed,
                detokenize=False,
            )
            for seed, n in zip(seeds, counts, strict=True)
        ]
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False
        )
        # Decoded once here rather than token by token in the engine's loop (with every
        # sampled logprob's token decoded too): on a small model that loop's detokenising took
        # as long as the model. The text is the tokens decoded whole, special tokens skipped,
        # as TRL decodes its completions (vLLM's incremental text drops an unfinished
        # character at the end).
        tokenizer = self.llm.get_tokenizer()
        return [
            [
                Completion(
                    token_ids=tuple(c.token_ids),
                    log_probs=tuple(
                        step[token].logprob
                        for step, token in zip(c.logprobs, c.token_ids, strict=True)
                    ),
                    text=tokenizer.decode(c.token_ids, skip_special_tokens=True),
                    finish_reason=c.finish_reason or "length",
                )
                for c in out.outputs
            ]
            for out in outputs
        ]

    def join_weight_group(self, address: GroupAddress, rank_offset: int, specs: list) -> None:
        """Join the learners' weight group (``rollout.weight_transport``), worker ``w`` as rank
        ``rank_offset + w``, expecting ``specs`` at every sync. Returns once every member has
        joined, so the driver calls all of them together."""
        # The workers may not be Ray processes (vLLM's multiprocessing executor); this actor is,
        # on their node, and knows the node's IP.
        self.llm.collective_rpc(
            "grpo_join_weight_group",
            args=(list(dataclasses.astuple(address)), rank_offset, node_ip(), specs),
        )

    def receive_weights(self) -> list[str]:
        """One sync, received by every worker while learner rank 0 sends, then the prefix cache
        dropped (its KV blocks belong to the old weights). Returns the parameters some worker
        expected and did not receive (empty: complete)."""
        missing = self.llm.collective_rpc("grpo_receive_weights")
        self.llm.reset_prefix_cache()
        return sorted({name for per_worker in missing for name in per_worker})

    def sleep(self) -> None:
        """Free the GPU for the learners (colocated); a no-op without sleep mode."""
        if self.settings.enable_sleep_mode:
            self.llm.sleep(level=1)

    def wake_up(self) -> None:
        if self.settings.enable_sleep_mode:
            self.llm.wake_up()

    def close(self) -> None:
        """Stop the engine core (before the actor is killed), and remove the shared memory
        segments its processes mapped, if it has any (a GPU engine, a tensor-parallel CPU one):
        vllm 0.32's shutdown leaves a message queue's segment (160 MiB) in /dev/shm."""
        segments = _shared_memory_of_children()
        self.llm.llm_engine.engine_core.shutdown()
        for path in segments:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _take_the_pods_cores(tensor_parallel_size: int) -> None:
    """The trainer never generates while it updates: while a CPU engine generates, its pod's
    cores are its own (``cores.cpu_engine_env``), unless the pod's env (resources.env) says how
    vLLM is to use them. Otherwise the engine's thread count is the trainer's, as the learners'
    is (Ray's ``OMP_NUM_THREADS`` replaced)."""
    if any(name in os.environ for name in VLLM_CPU_SETTINGS):
        return
    env = cpu_engine_env(pod_cores(), tensor_parallel_size)
    os.environ.update(env)
    if THREADS_ENV in env:
        import torch

        # Ray starts an actor with a fractional CPU request on one thread.
        torch.set_num_threads(int(env[THREADS_ENV]))


def _shared_memory_of_children() -> set[str]:
    """/dev/shm segments (``multiprocessing.shared_memory``'s ``psm_*``) mapped by this
    process's descendants (the EngineCore and its workers)."""
    import psutil

    found = set()
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error, OSError):
            found |= {m.path for m in child.memory_maps(grouped=True)
                      if m.path.startswith("/dev/shm/psm_")}
    return found
