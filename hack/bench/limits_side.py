"""What this machine can do without the trainer around it; runs in .venv, one subprocess each.

``engine``: the trainer's own rollout engine class (``RolloutEngine``, same ``EngineSettings``
as ``grpo_trainer.run.start_run`` builds) in a plain process, no Ray, generating the prompts
of the trainer's steps with the same sampling settings and ``n``. ``torch``: a bare loop on
the learner's batch of the median-width step (its left padding, attention mask and positions)
— the reference's no-grad forward (the experiments take one
optimizer step per batch, so the learner's update forward supplies the old-policy logprobs and
it runs no other no-grad pass) and one forward+backward+AdamW step over the same micro-batches.
Both run one round per step of the experiment (warm-up included) and write ``--out`` JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.experiment import Experiment, by_name
from bench.trainer_side import MODEL

# Spread the sampling seeds as the trainer does (child j of prompt i gets seed + j).
SEED_STRIDE = 1 << 20


def engine(exp: Experiment, workdir: Path, step_prompts: list[list[list[int]]]) -> dict:
    """Generate each step's prompts once; generated tokens and seconds per round (the caller
    drops the warm-up rounds)."""
    from grpo_trainer.rollout.engine import EngineSettings, RolloutEngine, SamplingSettings

    settings = EngineSettings(
        model_dir=str(workdir / MODEL),
        max_model_len=exp.max_prompt_tokens + exp.max_response_tokens,
        dtype="float32",
        seed=exp.seed,
    )
    sampling = SamplingSettings(group_size=exp.group_size, max_tokens=exp.max_response_tokens,
                                temperature=exp.temperature, top_p=exp.top_p)
    rollout = RolloutEngine(settings)
    print(f"[bench] rollout engine: {rollout.describe()}", flush=True)
    rounds = []
    try:
        for i, prompts in enumerate(step_prompts):
            seeds = [i * SEED_STRIDE + p * exp.group_size for p in range(len(prompts))]
            start = time.perf_counter()
            groups = rollout.generate(prompts, seeds, sampling)
            seconds = time.perf_counter() - start
            tokens = sum(len(c.token_ids) for group in groups for c in group)
            rounds.append({"seconds": seconds, "generated_tokens": tokens})
            print(f"[bench] standalone engine: round {i + 1}/{len(step_prompts)} "
                  f"{seconds:.2f} s", flush=True)
    finally:
        rollout.close()
    return {"rounds": rounds}


def median_width_step(step_prompts: list[list[list[int]]]) -> list[list[int]]:
    """The prompts of the step whose longest prompt is the median's (its batch's width)."""
    return sorted(step_prompts, key=lambda prompts: max(map(len, prompts)))[len(step_prompts) // 2]


def bare_torch(exp: Experiment, workdir: Path, prompts: list[list[int]]) -> dict:
    """One round per step of the experiment on the learner's batch of a step with these
    ``prompts``: each prompt ``group_size`` times, left-padded to the longest, then a response
    of ``max_response_tokens`` (a random model's completions run to the limit), with the
    attention mask and positions the learner passes (a padded batch needs them: without a mask
    the model would attend to the padding). Seconds of the no-grad forward and of the update in
    each round (the caller drops the warm-up rounds)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(exp.seed)
    policy = AutoModelForCausalLM.from_pretrained(workdir / MODEL, dtype=torch.float32)
    reference = AutoModelForCausalLM.from_pretrained(workdir / MODEL, dtype=torch.float32)
    reference.requires_grad_(False)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=exp.learning_rate, weight_decay=0.0)
    n, micro, tr = exp.sequences_per_step, exp.micro_batch_size, exp.max_response_tokens
    longest = max(map(len, prompts))
    width = longest + tr
    mask = torch.tensor([[0] * (longest - len(p)) + [1] * (len(p) + tr)
                         for p in prompts for _ in range(exp.group_size)])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    ids = torch.randint(0, policy.config.vocab_size, (n, width)) * mask
    advantages = torch.randn(n, 1)

    def logprobs(model, rows):
        # The head on the response's positions only, as the learner computes it.
        logits = model(input_ids=ids[rows], attention_mask=mask[rows],
                       position_ids=positions[rows], use_cache=False,
                       logits_to_keep=tr + 1).logits[:, :-1]
        return torch.log_softmax(logits, -1).gather(-1, ids[rows, -tr:, None])[..., 0]

    chunks = [slice(i, i + micro) for i in range(0, n, micro)]
    forward_s, update_s = [], []
    for r in range(exp.total_steps):
        start = time.perf_counter()
        with torch.no_grad():
            for rows in chunks:
                logprobs(reference, rows)
        middle = time.perf_counter()
        for rows in chunks:
            loss = -(logprobs(policy, rows) * advantages[rows]).sum() / (n * tr)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), exp.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        end = time.perf_counter()
        forward_s.append(middle - start)
        update_s.append(end - middle)
        print(f"[bench] bare torch: round {r + 1}/{exp.total_steps} {end - start:.2f} s",
              flush=True)
    return {"tokens": n * width, "logprob_passes_s": forward_s, "update_s": update_s,
            "torch_threads": torch.get_num_threads()}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.limits_side")
    parser.add_argument("command", choices=("engine", "torch"))
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prompts", type=Path, required=True,
                        help="JSON list of the trainer's steps' prompt ids")
    args = parser.parse_args()
    exp = by_name(args.experiment)
    step_prompts = json.loads(args.prompts.read_text())
    if args.command == "engine":
        result = engine(exp, args.workdir, step_prompts)
    else:
        result = bare_torch(exp, args.workdir, median_width_step(step_prompts))
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
